#!/usr/bin/env python3
"""The crate's public API, one item a line, from rustdoc's JSON (`.ci/public-api` makes it).

Walks the crate from its root as a user reaches it: public modules, the items they hold or
re-export, the public fields and variants of structs and enums, the inherent methods of types,
and the methods of traits. Every item has one path: an item public at two paths (a re-export
beside its home) is named on standard error and fails the run. Usage:
public_api.py target/.../partner_api.json > public-api.txt
"""

import json
import sys

KINDS = {
    "module": "mod",
    "struct": "struct",
    "enum": "enum",
    "trait": "trait",
    "function": "fn",
    "constant": "const",
    "static": "static",
    "type_alias": "type",
    "macro": "macro",
    "union": "union",
}


def main(path):
    document = json.load(open(path, encoding="utf-8"))
    index = document["index"]
    lines = set()
    seen_modules = set()
    paths_of = {}

    def item(item_id):
        return index.get(str(item_id))

    def kind_of(entry):
        return next(iter(entry["inner"]))

    def members(entry, path):
        kind = kind_of(entry)
        inner = entry["inner"][kind]
        if kind == "struct":
            fields = inner.get("kind", {})
            plain = fields.get("plain") if isinstance(fields, dict) else None
            for field_id in (plain or {}).get("fields", []):
                field = item(field_id)
                if field and field["visibility"] == "public":
                    lines.add(f"field {path}::{field['name']}")
        if kind == "enum":
            for variant_id in inner.get("variants", []):
                variant = item(variant_id)
                if variant:
                    lines.add(f"variant {path}::{variant['name']}")
        if kind == "trait":
            for member_id in inner.get("items", []):
                member = item(member_id)
                if member:
                    lines.add(f"{KINDS.get(kind_of(member), kind_of(member))} {path}::{member['name']}")
        for impl_id in inner.get("impls", []) if kind in ("struct", "enum", "union") else []:
            implementation = item(impl_id)
            if not implementation:
                continue
            block = implementation["inner"]["impl"]
            if block.get("trait") is not None or block.get("is_synthetic") or block.get("blanket_impl"):
                continue
            for method_id in block.get("items", []):
                method = item(method_id)
                if method and method["visibility"] == "public":
                    lines.add(f"{KINDS.get(kind_of(method), kind_of(method))} {path}::{method['name']}")

    def walk(module_id, path):
        if (module_id, path) in seen_modules:
            return
        seen_modules.add((module_id, path))
        module = item(module_id)
        for child_id in module["inner"]["module"]["items"]:
            child = item(child_id)
            if child is None:
                continue
            kind = kind_of(child)
            if kind == "use":
                use = child["inner"]["use"]
                target = item(use["id"]) if use.get("id") is not None else None
                if child["visibility"] != "public":
                    continue
                if use.get("is_glob"):
                    if target and kind_of(target) == "module":
                        walk(use["id"], path)
                    continue
                if target is None:
                    lines.add(f"use {path}::{use['name']} (from {use['source']})")
                    continue
                visit(use["id"], target, f"{path}::{use['name']}")
                continue
            if child["visibility"] != "public" or child.get("name") is None:
                continue
            if kind == "impl":
                continue
            visit(child_id, child, f"{path}::{child['name']}")

    def visit(item_id, entry, path):
        kind = kind_of(entry)
        lines.add(f"{KINDS.get(kind, kind)} {path}")
        paths_of.setdefault(str(item_id), set()).add(path)
        if kind == "module":
            walk(item_id, path)
        else:
            members(entry, path)

    root = document["root"]
    walk(root, item(root)["name"])
    for line in sorted(lines):
        print(line)
    twice = sorted(sorted(paths) for paths in paths_of.values() if len(paths) > 1)
    for paths in twice:
        print(f"one item at {len(paths)} paths: {', '.join(paths)}", file=sys.stderr)
    if twice:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1])
