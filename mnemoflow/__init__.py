"""mnemoflow: layered long-term memory and symbolic short-term memory for fleets of LLM agents.

The core package imports no runtime (Kafka, Faust, Ray, Milvus); ``streams``, ``actors`` and ``serving`` wire it
to them. Importing it writes no file and opens no socket.
"""

from mnemoflow.config import Settings
from mnemoflow.errors import MnemoflowError
from mnemoflow.events import ToolResultIn, TurnIn

__version__ = "0.1.0"
__all__ = ["MnemoflowError", "Settings", "ToolResultIn", "TurnIn", "__version__"]
