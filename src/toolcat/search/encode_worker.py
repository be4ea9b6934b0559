"""A reindex worker: encodes the batches its parent sends (``batch_encoding.WorkerPool``).

Run as ``python -m toolcat.search.encode_worker FOLDER DIGEST``: loads the export in FOLDER
on one onnxruntime thread, refuses to start unless its digest is DIGEST, then reads one JSON
line per batch (``{"keys": [...], "texts": [...]}``) from stdin and answers each with one
JSON line (``keys``, ``digest``, ``rows``, ``width``) followed by the vectors as
little-endian float32 bytes. Ctrl-C is the parent's to handle: the parent stops it; a
parent that dies takes it along (``die_with_parent``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from .batch_encoding import die_with_parent

    die_with_parent()
    # The answers go to the parent on what was stdout; anything else that writes there (a
    # library's message, from Python or C) goes to stderr, where the parent reads errors.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    folder, digest = Path(argv[0]), argv[1]
    from .encoders.export import read_export
    from .encoders.onnx import OnnxEncoder

    export = read_export(folder)
    if export.digest != digest:
        print(f"the export in {folder} is not the one asked for", file=sys.stderr)
        return 2
    encoder = OnnxEncoder(export, threads=1, spinning=False)
    for line in sys.stdin.buffer:
        request = json.loads(line)
        keys, texts = request["keys"], request["texts"]
        vectors = encoder.encode(texts).astype("<f4")
        header = {"keys": keys, "digest": digest, "rows": len(texts), "width": vectors.shape[1]}
        out.write(json.dumps(header).encode() + b"\n")
        out.write(vectors.tobytes())
        out.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as e:  # the parent reports the last line written here
        print(f"{type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
        sys.exit(1)
