"""Seeds of fuzz_npy: .npy files as NumPy writes them (format 1.0 and 2.0; float32 and int64; ranks 0 to 4)
and a few near misses. Run by hand in a venv with numpy: python fuzz/gen_npy_corpus.py fuzz/corpus/npy"""
import io
import pathlib
import sys

import numpy as np
from numpy.lib import format as npf

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
arrays = {
    "scalar_f32": np.array(1.5, np.float32),
    "vec_f32": np.arange(5, dtype=np.float32),
    "mat_f32": np.arange(6, dtype=np.float32).reshape(2, 3),
    "rank4_f32": np.ones((1, 2, 1, 3), np.float32),
    "vec_i64": np.arange(4, dtype=np.int64),
    "empty_f32": np.zeros((0, 3), np.float32),
    "big_endian": np.arange(3, dtype=">f4"),
    "fortran": np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    "f64": np.arange(3, dtype=np.float64),
}
for name, a in arrays.items():
    buf = io.BytesIO()
    np.save(buf, a)
    (out / f"{name}.npy").write_bytes(buf.getvalue())
buf = io.BytesIO()
npf.write_array(buf, np.arange(4, dtype=np.float32), version=(2, 0))
(out / "v2_f32.npy").write_bytes(buf.getvalue())
