"""Run by mkdocs-gen-files at every build (``make docs``): writes the generated reference pages into the site."""

import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))

import pages  # noqa: E402  (tools/docs is not a package)

for path, write in pages.GENERATED.items():
    with mkdocs_gen_files.open(path, "w") as page:
        page.write(write())
    mkdocs_gen_files.set_edit_path(path, "tools/docs/pages.py")
