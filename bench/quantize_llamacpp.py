#!/usr/bin/env python3
"""Quantize a GGUF with llama.cpp's quantizer (through the llama-cpp-python package).

usage: bench/quantize_llamacpp.py IN.gguf OUT.gguf TYPE [--pure]    (TYPE: q8_0, q4_0, q4_k_m)

--pure quantizes every matrix to TYPE (llama.cpp otherwise gives output.weight Q6_K for q4_0).

Used to make the benchmark files until `kiln quantize` exists. Speed does not depend on weight values.
"""
import sys

import llama_cpp

FTYPES = {
    "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
    "q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M,
}


def main() -> int:
    pure = "--pure" in sys.argv[4:]
    if len(sys.argv) not in (4, 5) or sys.argv[3] not in FTYPES:
        print(__doc__, file=sys.stderr)
        return 2
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[sys.argv[3]]
    params.nthread = 2
    params.pure = pure
    rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), params)
    if rc != 0:
        print(f"quantization failed ({rc})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
