#!/usr/bin/env python3
"""Generates the TFJob CRD with Kubernetes' own PodTemplateSpec schema.

    tools/gen_crd_schema.py --kubeconfig FILE   # from a running API server
    tools/gen_crd_schema.py --openapi FILE      # from a saved /openapi/v3/api/v1
    ... --check                                 # compare, write nothing

Why: Kubeflow's CRD embeds the full PodTemplateSpec schema, so kubectl
reports a typo in a replica's pod template, `kubectl explain` works below
`template`, a mistyped field is refused at admission and server-side apply
merges lists by key. Writing those ~200 KiB of schema by hand would drift from
Kubernetes; generating them from the API server's own OpenAPI does not.

How: the hand-written CRD lives in tools/crd/kubeflow.org_tfjobs.template.yaml
(comments, CEL rules, everything but the pod template's schema). Its one
node carrying `x-tfjob-schema: <definition>` is replaced by that
definition's schema, converted to a CRD structural schema, with the rest of
the node (the replica's CEL rules and the bounds that keep their cost within
the API server's budget) merged over it; the result is written, byte for byte
the same, to crds/kubeflow.org_tfjobs.yaml and
charts/tfjob-operator/crds/kubeflow.org_tfjobs.yaml. Same OpenAPI in, same
bytes out: keys are ordered and scalars quoted by fixed rules.

The OpenAPI comes from `kubectl get --raw /openapi/v3/api/v1` against the
cluster the kubeconfig names (kubectl: --kubectl, else $KUBECTL, else
.tools/bin/kubectl, else PATH), or from a file saved that way. The committed
CRD is generated from Kubernetes 1.26 (the control plane in
../shared/envtest); tools/crd/regen_test.sh checks that it still is.

From OpenAPI to a CRD structural schema:
  - every $ref and single-element allOf is inlined; the field's own
    description wins over its type's (it says what the field is for);
  - IntOrString and Quantity (oneOf integer|string, string|number) become
    `x-kubernetes-int-or-string` (a structural schema cannot say "number or
    string"; Quantity also gets controller-gen's pattern, so `cpu: 0.5` must
    be written `"0.5"` or `500m`, as with Kubeflow's CRD);
  - an object without properties or additionalProperties, or a node without
    a type, keeps unknown fields (free-form, like RawExtension);
  - `default`s that are Go's zero values ({}, "", 0, false) are dropped: they
    describe how Go decodes a missing field, and a CRD would store them in
    the user's template; the others (a port's protocol: TCP) are kept, as
    controller-gen keeps them;
  - an optional string enum also accepts "": pods treat "" as unset;
  - x-kubernetes-list-type, -list-map-keys and -map-type are kept; a list
    that pods merge by key (x-kubernetes-patch-merge-key with strategy
    merge) becomes `x-kubernetes-list-type: map` on that key when every item
    must have it (a CRD requires that), so server-side apply merges
    containers, volumes and mounts as it does for pods. Env stays atomic:
    pods accept two variables of one name, a CRD map list would not;
  - PodSpec.ephemeralContainers is left out: Kubernetes refuses it in a pod
    template, and without it the CRD stays under the 256 KiB that
    client-side `kubectl apply` can store in its last-applied annotation;
  - the embedded ObjectMeta is reduced to what controller-gen emits for an
    embedded template (annotations, finalizers, labels, name, namespace),
    plus a nullable creationTimestamp: Go's clients write
    `creationTimestamp: null` in templates, and server-side apply would
    refuse it as undeclared;
  - patch strategies, unions and discriminators have no CRD equivalent and
    are dropped. Any other keyword is an error, so a newer OpenAPI cannot
    slip something past unconverted.

Standard library only: this runs where pip does not.
"""

import argparse
import difflib
import json
import os
import re
import subprocess
import sys

REF_PREFIX = "#/components/schemas/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
EMBEDDED_META_FIELDS = ("annotations", "creationTimestamp", "finalizers", "labels", "name", "namespace")
# controller-gen's schema for resource.Quantity.
QUANTITY_PATTERN = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
# The API server refuses ephemeral containers in a pod template ("ephemeral
# containers not allowed in pod template") and on pod create: leaving them out
# costs nothing, and saves the 50 KiB that keep the CRD under client-side
# apply's 256 KiB last-applied annotation.
LEFT_OUT = {("io.k8s.api.core.v1.PodSpec", "ephemeralContainers")}
# Pod validation allows duplicate names here, which a map list would refuse.
KEEP_ATOMIC = {("io.k8s.api.core.v1.Container", "env")}
# OpenAPI keywords with no CRD counterpart; everything else must be converted.
DROPPED = {"x-kubernetes-patch-merge-key", "x-kubernetes-patch-strategy", "x-kubernetes-unions", "discriminator",
           "x-kubernetes-group-version-kind"}
MARKER = "x-tfjob-schema"

# The order keys are written in: what a node is, then its constraints, then
# its children (the hand-written part of the CRD reads the same way).
KEY_ORDER = ["description", "type", "format", "nullable", "x-kubernetes-int-or-string", "anyOf", "pattern",
             "enum", "default", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems",
             "minProperties", "maxProperties", "required", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
             "x-kubernetes-map-type", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-validations", "items",
             "additionalProperties", "properties"]


class GenError(Exception):
    pass


def is_zero(v):
    if isinstance(v, bool):
        return v is False
    if isinstance(v, (int, float)):
        return v == 0
    return v in ({}, [], "", None)


def ref_name(node):
    if "$ref" in node:
        ref = node["$ref"]
    elif "allOf" in node:
        if len(node["allOf"]) != 1 or set(node["allOf"][0]) != {"$ref"}:
            raise GenError("allOf other than one $ref is not supported: %s" % json.dumps(node)[:200])
        ref = node["allOf"][0]["$ref"]
    else:
        return None
    if not ref.startswith(REF_PREFIX):
        raise GenError("$ref outside components/schemas: " + ref)
    return ref[len(REF_PREFIX):]


def canonical(schema):
    known = [k for k in KEY_ORDER if k in schema]
    rest = sorted(k for k in schema if k not in KEY_ORDER)
    return {k: schema[k] for k in known + rest}


class Converter:
    def __init__(self, schemas):
        self.schemas = schemas

    def definition(self, name, stack):
        if name not in self.schemas:
            raise GenError("the OpenAPI has no definition " + name)
        if name in stack:
            # A CRD schema has no $ref, so a recursive type cannot be inlined.
            raise GenError("recursive type: " + " -> ".join(stack + [name]))
        stack = stack + [name]
        d = self.schemas[name]
        if name == OBJECT_META:
            props = d.get("properties", {})
            out = {"type": "object",
                   "properties": {f: self.convert(props[f], stack, name, f) for f in EMBEDDED_META_FIELDS}}
            # Go writes a template's zero creationTimestamp as null, and
            # server-side apply refuses a null it has no nullable field for.
            out["properties"]["creationTimestamp"]["nullable"] = True
            return canonical(out)
        out = self.convert(d, stack, name, None, own_type=True)
        if name == QUANTITY:
            out["pattern"] = QUANTITY_PATTERN
        return canonical(out)

    # `owner` and `field` name the definition and property `node` belongs to.
    def convert(self, node, stack, owner, field, own_type=False):
        name = None if own_type else ref_name(node)
        out = dict(self.definition(name, stack)) if name else {}
        rest = {k: v for k, v in node.items() if k not in ("$ref", "allOf")} if name else node
        for k, v in rest.items():
            if k == "description":
                out["description"] = v
            elif k == "type":
                out["type"] = v
            elif k == "format":
                if v != "int-or-string":
                    out["format"] = v
            elif k == "oneOf":
                types = {alt.get("type") for alt in v}
                if types not in ({"integer", "string"}, {"number", "string"}) or any(len(a) != 1 for a in v):
                    raise GenError("unsupported oneOf in %s.%s: %s" % (owner, field, json.dumps(v)))
                out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
                out["x-kubernetes-int-or-string"] = True
            elif k == "enum":
                out["enum"] = list(v)
            elif k == "default":
                if not is_zero(v):
                    out["default"] = v
            elif k == "required":
                out["required"] = list(v)
            elif k == "items":
                out["items"] = self.convert(v, stack, owner, field)
            elif k == "additionalProperties":
                if not isinstance(v, dict):
                    raise GenError("additionalProperties must be a schema in %s.%s" % (owner, field))
                out["additionalProperties"] = self.convert(v, stack, owner, field)
            elif k == "properties":
                req = set(node.get("required", []))
                props = {}
                for p in sorted(v):
                    if (owner, p) in LEFT_OUT:
                        continue
                    s = self.convert(v[p], stack, owner, p)
                    if "enum" in s and p not in req and "" not in s["enum"] and s.get("type") == "string":
                        s["enum"] = [""] + s["enum"]
                    props[p] = s
                out["properties"] = props
            elif k in ("x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type"):
                out[k] = v
            elif k in DROPPED or k == "fields-to-discriminateBy":
                pass
            else:
                raise GenError("unconverted OpenAPI keyword %r in %s.%s" % (k, owner, field))
        self.keyed_list(node, out, owner, field)
        if not out.get("x-kubernetes-int-or-string"):
            t = out.get("type")
            if t is None or (t == "object" and "properties" not in out and "additionalProperties" not in out):
                out["x-kubernetes-preserve-unknown-fields"] = True
        if out.get("x-kubernetes-list-type") == "map":
            item = out["items"]
            for key in out["x-kubernetes-list-map-keys"]:
                if key not in item.get("required", []) and "default" not in item["properties"].get(key, {}):
                    raise GenError("%s.%s: list map key %s is neither required nor defaulted" % (owner, field, key))
        return canonical(out)

    @staticmethod
    def keyed_list(node, out, owner, field):
        key = node.get("x-kubernetes-patch-merge-key")
        strategy = node.get("x-kubernetes-patch-strategy", "").split(",")
        if key is None or "merge" not in strategy or "x-kubernetes-list-type" in out:
            return
        if (owner, field) in KEEP_ATOMIC:
            return
        if key not in out.get("items", {}).get("required", []):
            return
        out["x-kubernetes-list-type"] = "map"
        out["x-kubernetes-list-map-keys"] = [key]


def merge(base, overlay, path):
    """Overlay's keys win; under `properties` it may only name fields the base has."""
    out = dict(base)
    for k, v in overlay.items():
        if k == "properties":
            props = dict(base.get("properties", {}))
            for p, sub in v.items():
                if p not in props:
                    raise GenError("the template's %s names %s, which the generated schema lacks" % (path, p))
                props[p] = merge(props[p], sub, path + "." + p)
            out[k] = props
        elif k in ("items", "additionalProperties") and isinstance(v, dict):
            out[k] = merge(base.get(k, {}), v, path + ("[]" if k == "items" else ".*"))
        else:
            out[k] = v
    return canonical(out)


# --- The few YAML forms the template's overlay uses: block maps and lists,
# plain, quoted and flow-list scalars. Anything else is an error.

def parse_scalar(text, where):
    t = text.strip()
    if t.startswith('"'):
        return json.loads(t)
    if t.startswith("'"):
        if not t.endswith("'"):
            raise GenError(where + ": unterminated quote")
        return t[1:-1].replace("''", "'")
    if t == "{}":
        return {}
    if t.startswith("["):
        if not t.endswith("]"):
            raise GenError(where + ": a flow list must end on its line")
        body = t[1:-1].strip()
        items, cur, quote = [], "", None
        for ch in body:
            if quote:
                cur += ch
                if ch == quote:
                    quote = None
            elif ch in "\"'":
                quote = ch
                cur += ch
            elif ch == ",":
                items.append(cur)
                cur = ""
            else:
                cur += ch
        if body:
            items.append(cur)
        return [parse_scalar(i, where) for i in items]
    if re.fullmatch(r"-?[0-9]+", t):
        return int(t)
    if t in ("true", "false"):
        return t == "true"
    if " #" in t or ": " in t or t[:1] in "&*!|>%@`{":
        raise GenError(where + ": quote this scalar: " + t)
    return t


class OverlayParser:
    def __init__(self, lines, first_lineno):
        self.toks = []
        for n, line in enumerate(lines, first_lineno):
            if not line.strip():
                continue
            if line.lstrip().startswith("#"):
                raise GenError("line %d: a comment inside the generated node would be lost; put it above %s"
                               % (n, MARKER))
            self.toks.append([n, len(line) - len(line.lstrip(" ")), line.strip()])

    def parse(self):
        value, i = self.block(0, self.toks[0][1])
        if i != len(self.toks):
            raise GenError("line %d: unexpected indentation" % self.toks[i][0])
        return value

    def block(self, i, indent):
        if self.toks[i][2].startswith("- ") or self.toks[i][2] == "-":
            return self.seq(i, indent)
        return self.map(i, indent)

    def map(self, i, indent):
        out = {}
        while i < len(self.toks) and self.toks[i][1] == indent and not self.toks[i][2].startswith("-"):
            n, _, text = self.toks[i]
            m = re.fullmatch(r"""([A-Za-z0-9_.$-]+|"[^"]*"|'[^']*'):(?:\s+(.*))?""", text)
            if not m:
                raise GenError("line %d: expected `key: value`" % n)
            key = m.group(1).strip("\"'")
            if key in out:
                raise GenError("line %d: duplicate key %s" % (n, key))
            i += 1
            if m.group(2) is not None:
                out[key] = parse_scalar(m.group(2), "line %d" % n)
            elif i < len(self.toks) and (self.toks[i][1] > indent or
                                         (self.toks[i][1] == indent and self.toks[i][2].startswith("- "))):
                out[key], i = self.block(i, self.toks[i][1])
            else:
                raise GenError("line %d: %s has no value" % (n, key))
        if i < len(self.toks) and self.toks[i][1] > indent:
            raise GenError("line %d: unexpected indentation" % self.toks[i][0])
        return out, i

    def seq(self, i, indent):
        out = []
        while i < len(self.toks) and self.toks[i][1] == indent and self.toks[i][2].startswith("- "):
            n, _, text = self.toks[i]
            body = text[2:].strip()
            if re.match(r"""([A-Za-z0-9_.$-]+|"[^"]*"|'[^']*'):(\s|$)""", body):
                # `- key: v` opens a map whose keys line up with `key`.
                self.toks[i] = [n, indent + 2, body]
                item, i = self.map(i, indent + 2)
            else:
                item = parse_scalar(body, "line %d" % n)
                i += 1
            out.append(item)
        return out, i


# --- YAML out.

PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9 _./()-]*")
YAML11_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if v is None:
        return "null"
    if isinstance(v, str):
        if PLAIN.fullmatch(v) and not v.endswith(" ") and v.lower() not in YAML11_WORDS:
            return v
        return json.dumps(v, ensure_ascii=False)
    raise GenError("cannot write %r" % (v,))


def is_scalar(v):
    return not isinstance(v, (dict, list))


def emit(value, indent, out):
    pad = " " * indent
    for k, v in value.items():
        key = scalar(k)
        if is_scalar(v):
            out.append("%s%s: %s" % (pad, key, scalar(v)))
        elif not v:
            out.append("%s%s: %s" % (pad, key, "{}" if isinstance(v, dict) else "[]"))
        elif isinstance(v, dict):
            out.append("%s%s:" % (pad, key))
            emit(v, indent + 2, out)
        elif all(is_scalar(x) for x in v):
            out.append("%s%s: [%s]" % (pad, key, ", ".join(scalar(x) for x in v)))
        else:
            out.append("%s%s:" % (pad, key))
            for item in v:
                if not isinstance(item, dict) or not item:
                    raise GenError("lists mixing maps and scalars are not supported: %s" % k)
                lines = []
                emit(item, indent + 4, lines)
                lines[0] = "%s  - %s" % (pad, lines[0][indent + 4:])
                out.extend(lines)


# --- Putting it together.

def fill_template(template_text, schemas, version, template_name):
    lines = template_text.split("\n")
    marks = [i for i, l in enumerate(lines) if re.fullmatch(r"\s*%s:.*" % MARKER, l)]
    if len(marks) != 1:
        raise GenError("%s must have exactly one %s line, has %d" % (template_name, MARKER, len(marks)))
    mark = marks[0]
    indent = len(lines[mark]) - len(lines[mark].lstrip(" "))
    definition = lines[mark].split(":", 1)[1].strip()

    def indent_of(l):
        return len(l) - len(l.lstrip(" "))

    start = mark
    while start > 0 and (not lines[start - 1].strip() or indent_of(lines[start - 1]) >= indent):
        start -= 1
    end = mark + 1
    while end < len(lines) and (not lines[end].strip() or indent_of(lines[end]) >= indent):
        end += 1
    while end > mark + 1 and not lines[end - 1].strip():
        end -= 1
    head = lines[start:mark]
    if any(l.strip() and not l.lstrip().startswith("#") for l in head):
        raise GenError("line %d: only comments may come before %s in its node" % (mark + 1, MARKER))
    body = lines[mark + 1:end]
    overlay = OverlayParser(body, mark + 2).parse() if any(l.strip() for l in body) else {}
    if not isinstance(overlay, dict):
        raise GenError("line %d: the node under %s must be a map" % (mark + 2, MARKER))

    schema = Converter(schemas).definition(definition, [])
    merged = merge(schema, overlay, definition)
    out = []
    emit(merged, indent, out)
    header = ["# Generated by tools/gen_crd_schema.py from %s" % template_name,
              "# and the %s schema of Kubernetes %s:" % (definition, version),
              "# edit those, then regenerate (docs/install.md)."]
    return "\n".join(header + lines[:start] + head + out + lines[end:])


def fetch_openapi(args):
    if args.openapi:
        with open(args.openapi, encoding="utf-8") as f:
            return json.load(f)
    kubectl = args.kubectl or os.environ.get("KUBECTL")
    if not kubectl:
        bundled = os.path.join(args.root, ".tools", "bin", "kubectl")
        kubectl = bundled if os.access(bundled, os.X_OK) else "kubectl"
    cmd = [kubectl, "--kubeconfig", args.kubeconfig, "get", "--raw", "/openapi/v3/api/v1"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GenError("%s: %s" % (" ".join(cmd), e))
    if r.returncode != 0:
        raise GenError("%s exited %d: %s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
    return json.loads(r.stdout)


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--kubeconfig", help="read /openapi/v3/api/v1 from this cluster's API server")
    src.add_argument("--openapi", help="a saved `kubectl get --raw /openapi/v3/api/v1`")
    p.add_argument("--kubectl", help="kubectl to run (default: $KUBECTL, .tools/bin/kubectl, PATH)")
    p.add_argument("--root", default=root, help="the project root (default: this script's parent)")
    p.add_argument("--check", action="store_true", help="compare with the committed files; write nothing")
    args = p.parse_args(argv)

    template = "tools/crd/kubeflow.org_tfjobs.template.yaml"
    outputs = ["crds/kubeflow.org_tfjobs.yaml", "charts/tfjob-operator/crds/kubeflow.org_tfjobs.yaml"]
    try:
        doc = fetch_openapi(args)
        schemas = doc.get("components", {}).get("schemas")
        if not schemas:
            raise GenError("no components.schemas: is this /openapi/v3/api/v1?")
        version = doc.get("info", {}).get("version", "(unknown version)")
        with open(os.path.join(args.root, template), encoding="utf-8") as f:
            text = fill_template(f.read(), schemas, version, template)
    except (GenError, OSError, ValueError) as e:
        print("gen_crd_schema: " + str(e), file=sys.stderr)
        return 2
    stale = 0
    for rel in outputs:
        path = os.path.join(args.root, rel)
        if args.check:
            try:
                with open(path, encoding="utf-8", newline="") as f:
                    have = f.read()
            except OSError as e:
                have = ""
                print("gen_crd_schema: %s" % e, file=sys.stderr)
            if have != text:
                stale += 1
                diff = list(difflib.unified_diff(have.split("\n"), text.split("\n"), rel, "generated", lineterm=""))
                print("\n".join(diff[:60]))
                print("gen_crd_schema: %s is not what tools/gen_crd_schema.py generates (%d diff lines)"
                      % (rel, len(diff)), file=sys.stderr)
        else:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
    if args.check and not stale:
        print("gen_crd_schema: %s are up to date (Kubernetes %s)" % (" and ".join(outputs), version))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
