"""JSON schemas for kubeconform, made offline: built-in kinds from kubernetes-validate, custom kinds from CRDs.

Built-in kinds: the ``kubernetes-validate`` wheel ships strict schemas per Kubernetes minor (the OpenAPI of the
API server, ``additionalProperties: false`` everywhere), whose ``$ref`` point at a shared
``/api/_definitions.json``; the copy here makes each schema self-contained.

Custom kinds: each *served* version of a CRD becomes ``<group>/<kind>_<version>.json``. A version the operator
no longer serves (Strimzi's ``v1beta2``) gets no schema, so kubeconform refuses it as unknown. The schema says
what the API server enforces: an object with ``properties`` and no ``x-kubernetes-preserve-unknown-fields``
takes no other field (the server prunes or, with strict field validation, refuses them); ``nullable`` admits
null; ``x-kubernetes-int-or-string`` admits both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

BUILTIN_TEMPLATE = "{{ .ResourceKind }}{{ .KindSuffix }}.json"
CRD_TEMPLATE = "{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"


def builtin(src: Path, out: Path) -> int:
    """Write the strict built-in schemas of ``src`` (``.../v1.NN.0-local-strict``) self-contained: each with the
    definitions it reaches copied into its own ``$defs`` (kubeconform compiles one file and cannot follow the
    wheel's ``/api/_definitions.json`` references)."""
    out.mkdir(parents=True, exist_ok=True)
    defs = json.loads((src / "_definitions.json").read_text())["$defs"]
    n = 0
    for path in src.glob("*.json"):
        if path.name.startswith("_"):
            continue
        schema = _local_refs(json.loads(path.read_text()))
        reached: dict[str, Any] = {}
        todo = _refs(schema)
        while todo:
            name = todo.pop()
            if name not in reached:
                reached[name] = _local_refs(defs[name])
                todo |= _refs(reached[name])
        if reached:
            schema["$defs"] = reached
        (out / path.name).write_text(json.dumps(schema))
        n += 1
    return n


_REF_PREFIX = "/api/_definitions.json#/$defs/"


def _local_refs(node: Any) -> Any:
    if isinstance(node, dict):
        # A string "$ref" is a reference; a dict under "$ref" is a field of that name (JSONSchemaProps has one).
        return {
            k: v.replace(_REF_PREFIX, "#/$defs/") if k == "$ref" and isinstance(v, str) else _local_refs(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_local_refs(n) for n in node]
    return node


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].removeprefix("#/$defs/")} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(n) for n in node))
    return set()


def crds(files: list[Path], out: Path) -> list[str]:
    """Write one schema per served version of each CRD in ``files``; returns ``group/kind_version`` names."""
    written = []
    for file in files:
        for doc in yaml.safe_load_all(file.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                if not version.get("served", False):
                    continue
                schema = strict(version["schema"]["openAPIV3Schema"])
                schema.setdefault("properties", {}).update(
                    apiVersion={"type": "string", "enum": [f"{group}/{version['name']}"]},
                    kind={"type": "string", "enum": [kind]},
                )
                schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind"})
                target = out / group / f"{kind.lower()}_{version['name']}.json"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps(schema))
                written.append(f"{group}/{kind.lower()}_{version['name']}")
    return written


_NAMED_SCHEMAS = {"properties", "patternProperties", "definitions", "$defs"}
_VALUES = {"default", "enum", "example", "const"}


def strict(node: Any, *, root: bool = True) -> Any:
    """The structural schema ``node`` as JSON Schema with unknown fields refused (see the module docstring)."""
    if isinstance(node, list):
        return [strict(n, root=False) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key in _NAMED_SCHEMAS:  # field name -> schema: the names are data, not keywords
            out[key] = {name: strict(sub, root=False) for name, sub in value.items()}
        elif key in _VALUES:
            out[key] = value
        else:
            out[key] = strict(value, root=False)
    out.pop("nullable", None)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-embedded-resource")
    if "properties" in node and "additionalProperties" not in node and not preserve:
        out["additionalProperties"] = False
    if root:
        # metadata is checked by the API server (ObjectMeta), not by the CRD's schema.
        out.setdefault("properties", {})["metadata"] = {"type": "object"}
    return out
