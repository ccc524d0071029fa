# The Python package's share of the build, included by the top-level CMakeLists.txt when KILN_LIBRARY_ONLY
# is set (python/pyproject.toml sets it, and builds only the kiln_shared target). libkiln.so goes into the
# package folder under its plain name: kiln/_lib.py loads it from there with ctypes, so one file is
# installed, not the versioned name and its two symlinks (wheels store symlinks as copies).
install(FILES $<TARGET_FILE:kiln_shared> DESTINATION kiln RENAME libkiln.so COMPONENT python)
