#!/usr/bin/env python3
"""Regenerates abi/libNVFP4.symbols from the Q4_API declarations in
include/nvfp4/*.h. Run it after adding a function; the export test then
checks the library against the list. Never remove a shipped symbol."""
import glob
import os
import re

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
decl = re.compile(r"^Q4_API\s+(?:const\s+)?\w+\s*\**\s*(\w+)\s*\(", re.M)
names = set()
for header in glob.glob(os.path.join(root, "include", "nvfp4", "*.h")):
    names.update(decl.findall(open(header).read()))
path = os.path.join(root, "abi", "libNVFP4.symbols")
with open(path, "w") as f:
    f.write("# Exported symbols of libNVFP4.so (ABI 1). A test compares this list with nm -D.\n")
    f.write("# Regenerate with abi/update_symbols.py; never remove or rename a shipped symbol.\n")
    for n in sorted(names):
        f.write(n + "\n")
print(f"{len(names)} symbols -> {path}")
