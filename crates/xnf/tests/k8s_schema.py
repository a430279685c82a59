"""Checks Kubernetes manifests against the API's own models, offline.

    /usr/bin/python3 k8s_schema.py FILE.yaml...

Every document is matched to the model of its apiVersion and kind in
Debian's python3-kubernetes (the client generated from the API's OpenAPI
schema: V1DaemonSet, V1ConfigMap, ...) and walked field by field: a field
the model does not have (a misspelling), a value of the wrong type (a
number where the API wants a string, a mapping where it wants a list) is
an error naming the path to it. Then the client deserializes the document
as it would an API server's answer, which enforces required fields.
Prints one line per error and exits 1, or prints one `ok` line per
document. Used by crates/xnf/tests/deploy.rs.
"""

import json
import sys

import yaml
from kubernetes import client
from kubernetes.client import models

# Types of the generated models' openapi_types that are not models.
PRIMITIVES = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "date": (str,),
    "datetime": (str,),
    # IntOrString (ports, maxUnavailable), free-form fields.
    "object": (object,),
}


def walk(data, typ, path, errors):
    if data is None:
        return
    if typ.startswith("list[") and typ.endswith("]"):
        if not isinstance(data, list):
            errors.append(f"{path}: a list expected, not {type(data).__name__}")
            return
        for i, item in enumerate(data):
            walk(item, typ[5:-1], f"{path}[{i}]", errors)
        return
    if typ.startswith("dict(") and typ.endswith(")"):
        if not isinstance(data, dict):
            errors.append(f"{path}: a mapping expected, not {type(data).__name__}")
            return
        inner = typ[5:-1].split(",", 1)[1].strip()
        for key, value in data.items():
            if not isinstance(key, str):
                errors.append(f"{path}: key {key!r} is not a string")
            walk(value, inner, f"{path}.{key}", errors)
        return
    if typ in PRIMITIVES:
        ok = isinstance(data, PRIMITIVES[typ])
        # YAML's true is no number, and Kubernetes takes no 1 for a bool.
        if typ in ("int", "float") and isinstance(data, bool):
            ok = False
        if not ok:
            errors.append(f"{path}: {typ} expected, not {type(data).__name__} {data!r}")
        return
    klass = getattr(models, typ, None)
    if klass is None:
        errors.append(f"{path}: no model {typ} in this kubernetes client")
        return
    if not isinstance(data, dict):
        errors.append(f"{path}: a {typ} mapping expected, not {type(data).__name__}")
        return
    fields = {json_name: attr for attr, json_name in klass.attribute_map.items()}
    for key, value in data.items():
        if key not in fields:
            errors.append(f"{path}: unknown field {key!r} (a {typ} has: {', '.join(sorted(fields))})")
            continue
        walk(value, klass.openapi_types[fields[key]], f"{path}.{key}", errors)


def model_of(doc):
    """V1DaemonSet for apps/v1 DaemonSet, V1ConfigMap for v1 ConfigMap."""
    version = str(doc.get("apiVersion", "")).split("/")[-1]
    return version[:1].upper() + version[1:] + str(doc.get("kind", ""))


class Response:
    """What ApiClient.deserialize reads: an answer's body."""

    def __init__(self, doc):
        self.data = json.dumps(doc)


def check(path):
    errors = []
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    api = client.ApiClient()
    for n, doc in enumerate(docs):
        where = f"{path}: document {n + 1}"
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            errors.append(f"{where}: no apiVersion and kind")
            continue
        typ = model_of(doc)
        where = f"{path}: {doc['kind']} {doc.get('metadata', {}).get('name', '?')}"
        if getattr(models, typ, None) is None:
            errors.append(f"{where}: no model {typ} for apiVersion {doc['apiVersion']}")
            continue
        found = []
        walk(doc, typ, typ, found)
        errors += [f"{where}: {e}" for e in found]
        if not found:
            try:
                api.deserialize(Response(doc), typ)
            except (ValueError, TypeError) as e:
                errors.append(f"{where}: {e}")
                continue
            print(f"ok {typ} {doc['metadata']['name']}")
    return errors


def main():
    errors = [e for path in sys.argv[1:] for e in check(path)]
    for e in errors:
        print(e)
    sys.exit(1 if errors or len(sys.argv) < 2 else 0)


if __name__ == "__main__":
    main()
