"""A reindex worker: encodes the batches its parent sends (``batch_encoding.WorkerPool``).

Run as ``python -m toolcat.search.encode_worker FOLDER DIGEST``: loads the export in FOLDER
on one onnxruntime thread, refuses to start unless its digest is DIGEST, then reads one JSON
line per batch (``{"keys": [...], "texts": [...]}``) from stdin and answers each with one
JSON line (``keys``, ``digest``, ``rows``, ``width``) followed by the vectors as
little-endian float32 bytes. Ctrl-C is the parent's to handle: the parent stops it.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    folder, digest = Path(argv[0]), argv[1]
    from .onnx_encoder import OnnxEncoder, read_export

    export = read_export(folder)
    if export.digest != digest:
        print(f"the export in {folder} is not the one asked for", file=sys.stderr)
        return 2
    encoder = OnnxEncoder(export, threads=1, spinning=False)
    out = sys.stdout.buffer
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
