#!/usr/bin/env python3
"""Fails when a source file includes a header from a layer above its own.

Layers of the library (src/), lowest first; a file may include its own
folder's headers, the public headers (nvfp4/...), the standard library and
the layers listed as allowed for it:

    common   <- formats <- plugin (the private CUDA plugin interface)
             <- kernels <- core <- api
    io sits beside core: it may use common and formats; core may use io.

The CUDA plugin (cuda/) may use formats, plugin and common headers only.
Usage: check_layers.py SOURCE_DIR
"""
import os
import re
import sys

ALLOWED = {
    "common": {"common"},
    "formats": {"common", "formats"},
    "plugin": {"common", "formats", "plugin"},
    "kernels": {"common", "formats", "kernels"},
    "io": {"common", "formats", "io"},
    "core": {"common", "formats", "plugin", "kernels", "io", "core"},
    "api": {"common", "formats", "core", "api"},
    "cuda": {"common", "formats", "plugin", "cuda"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def layer_of_file(root, path):
    rel = os.path.relpath(path, root).split(os.sep)
    if rel[0] == "src" and len(rel) > 2:
        return rel[1]
    if rel[0] == "cuda":
        return "cuda"
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems = []
    checked = 0
    for top in ("src", "cuda"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in files:
                if not name.endswith((".h", ".hpp", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, name)
                layer = layer_of_file(root, path)
                if layer not in ALLOWED:
                    problems.append(f"{os.path.relpath(path, root)}: not in a known layer folder")
                    continue
                checked += 1
                text = open(path, encoding="utf-8").read()
                for inc in INCLUDE.findall(text):
                    first = inc.split("/")[0]
                    if "/" not in inc:
                        # A file next to this one (only allowed inside cuda/).
                        if layer != "cuda":
                            problems.append(f"{os.path.relpath(path, root)}: include \"{inc}\" without its layer folder")
                        continue
                    if first == "nvfp4":
                        continue  # public headers
                    if first not in ALLOWED[layer]:
                        problems.append(
                            f"{os.path.relpath(path, root)}: layer '{layer}' includes \"{inc}\" "
                            f"from layer '{first}' (allowed: {', '.join(sorted(ALLOWED[layer]))})")
    for p in problems:
        print(p)
    print(f"{checked} files checked, {len(problems)} layer violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
