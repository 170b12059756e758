"""Keep a Serve replica's own gRPC server on loopback when its Ray node is on loopback (the embedded shape).

Ray Serve 2.60 starts every replica's inter-deployment gRPC server on ``[::]:0`` whatever the node's address
(``ray/serve/_private/replica.py``), so on one machine it is the only listener of the stack that any host could
reach. Each deployment calls :func:`keep_replica_on_loopback` in its constructor, which runs before Serve starts
that server. In the cluster shape the node address is the pod's and nothing changes. The integration test of
``mnemoflow up`` walks every listener of the stack and fails if a Ray upgrade makes this stop working.
"""

from __future__ import annotations

from typing import Any

LOOPBACK = "127.0.0.1"


def keep_replica_on_loopback() -> None:
    import ray
    from ray.serve._private import replica

    if ray.util.get_node_ip_address() != LOOPBACK:
        return
    bind = replica.add_port_to_grpc_server
    if getattr(bind, "loopback_only", False):
        return

    def bind_on_loopback(server: Any, address: str) -> int:
        return bind(server, address.replace("[::]", LOOPBACK, 1))

    bind_on_loopback.loopback_only = True  # type: ignore[attr-defined]  # a marker on the function: patch once
    replica.add_port_to_grpc_server = bind_on_loopback
