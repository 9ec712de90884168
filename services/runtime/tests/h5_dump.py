"""Reads a Keras .weights.h5 file with Debian's python3-h5py and writes what
it holds for the tests to compare: OUT/manifest.json lists every group and,
for every dataset, its dtype, shape, the file OUT/<n>.bin with its raw
little-endian bytes, and its value when it is a scalar.

usage: h5_dump.py WEIGHTS.h5 OUT_DIR
"""
import json
import os
import sys

import h5py


def main():
    path, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    groups, datasets = [], {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Group):
                groups.append(name)
                return
            arr = obj[()]
            entry = {"dtype": str(obj.dtype), "shape": list(obj.shape), "file": f"{len(datasets)}.bin"}
            if obj.shape == ():
                entry["value"] = arr.item()
            with open(os.path.join(out, entry["file"]), "wb") as b:
                b.write(obj.dtype.newbyteorder("<").type(arr).tobytes() if obj.shape == () else
                        arr.astype(obj.dtype.newbyteorder("<")).tobytes())
            datasets[name] = entry
        f.visititems(visit)
    with open(os.path.join(out, "manifest.json"), "w") as m:
        json.dump({"groups": sorted(groups), "datasets": datasets}, m, indent=1)


if __name__ == "__main__":
    main()
