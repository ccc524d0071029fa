"""Seeds of fuzz_npz: .npz archives as NumPy writes them (numpy.savez stores, savez_compressed deflates; float32
and int64 members; empty; many members) and a few near misses (a member not named NAME.npy, a member that is
not a .npy image, a damaged CRC). Run by hand in a venv with numpy: python fuzz/gen_npz_corpus.py fuzz/corpus/npz"""
import io
import pathlib
import sys
import zipfile

import numpy as np

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


def save(name, fn, **arrays):
    buf = io.BytesIO()
    fn(buf, **arrays)
    (out / f"{name}.npz").write_bytes(buf.getvalue())


ids = np.array([[1, 5, 9, 2]], np.int64)
save("stored_two", np.savez, input_ids=ids, attention_mask=np.ones_like(ids))
save("deflated_two", np.savez_compressed, input_ids=ids, attention_mask=np.ones_like(ids))
save("stored_f32", np.savez, x=np.arange(12, dtype=np.float32).reshape(3, 4))
save("deflated_zeros", np.savez_compressed, x=np.zeros((64, 64), np.float32))
save("empty", np.savez)
save("many", np.savez, **{f"a{i}": np.array([i], np.float32) for i in range(12)})
save("scalar", np.savez, s=np.array(2.5, np.float32))

buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("notes.txt", b"not an array")
(out / "not_npy_name.npz").write_bytes(buf.getvalue())
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("x.npy", b"not numpy")
(out / "not_npy_image.npz").write_bytes(buf.getvalue())
data = bytearray((out / "stored_f32.npz").read_bytes())
data[-60] ^= 0xFF  # inside the central directory or the data: either is a named refusal
(out / "damaged.npz").write_bytes(bytes(data))
