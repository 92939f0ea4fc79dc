"""How long each call to TensorBoard's data server (the fast loader) takes on a run, by call and size.

    python bench/profile_data_server.py /tmp/xray_long/long1000/long1000

It starts the data server binary on the run's parent folder (127.0.0.1, a free port, stopped by its
PID), waits until the run is loaded, and prints the median and max of 10 calls of each: the listing
of the whole run, of one tag, of the runs; ``read_blob_sequences`` of one frame tag with 1,000 points
and with 2; one ``read_blob`` of a frame's header and of its values, and both at once; then the values,
and both, read as the plugin reads them, on a connection of their own (``tb_plugin.blob_connections``).
The run is one written by ``bench/bench_long_run.py``.
"""

from __future__ import annotations

import concurrent.futures
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import tensorboard_data_server
from tensorboard import context
from tensorboard.data import grpc_provider, provider

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tb_plugin.blob_connections import BlobReads  # noqa: E402

TAG = "xray/frame/0/weight"


def timed(call, repeats: int = 100) -> str:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return f"{statistics.median(times):6.1f} ms median, {max(times):6.1f} max"


def main() -> None:
    run_dir = Path(sys.argv[1]).resolve()
    run = run_dir.name
    port_file = Path(tempfile.mkdtemp()) / "port"
    command = [tensorboard_data_server.server_binary(), "--logdir", str(run_dir.parent), "--host", "127.0.0.1", "--port", "0",
               "--port-file", str(port_file), "--samples-per-plugin", "xray=all", "--reload", "once"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not (port_file.exists() and port_file.read_text().strip()):
            time.sleep(0.05)
        address = f"127.0.0.1:{port_file.read_text().strip()}"
        data = grpc_provider.GrpcDataProvider(address, grpc_provider.make_stub(grpc.insecure_channel(address)))
        ctx, eid = context.RequestContext(), ""

        def points(count: int) -> list:
            read = data.read_blob_sequences(ctx, experiment_id=eid, plugin_name="xray", downsample=count, run_tag_filter=provider.RunTagFilter(runs=[run], tags=[TAG]))
            return read.get(run, {}).get(TAG, [])

        loaded = -1
        while len(found := points(10**6)) != loaded or loaded < 2:  # loaded once two reads agree
            loaded = len(found)
            time.sleep(1.0)
        refs = found[len(found) // 2].values
        pool = concurrent.futures.ThreadPoolExecutor(2)
        calls = {
            "list_blob_sequences, whole run": lambda: data.list_blob_sequences(ctx, experiment_id=eid, plugin_name="xray", run_tag_filter=provider.RunTagFilter(runs=[run])),
            "list_blob_sequences, one tag": lambda: data.list_blob_sequences(ctx, experiment_id=eid, plugin_name="xray", run_tag_filter=provider.RunTagFilter(runs=[run], tags=[TAG])),
            "list_runs": lambda: data.list_runs(ctx, experiment_id=eid),
            f"read_blob_sequences, one tag, {loaded} points": lambda: points(10**6),
            "read_blob_sequences, one tag, 2 points": lambda: points(2),
            "read_blob, a frame's header": lambda: data.read_blob(ctx, blob_key=refs[0].blob_key),
            "read_blob, a frame's values": lambda: data.read_blob(ctx, blob_key=refs[1].blob_key),
            "read_blob, both at once": lambda: list(pool.map(lambda ref: data.read_blob(ctx, blob_key=ref.blob_key), refs)),
            "its values on a connection of their own": lambda: fresh.read(ctx, [refs[1].blob_key]),
            "both on a connection of their own": lambda: fresh.read(ctx, [ref.blob_key for ref in refs]),
        }
        fresh = BlobReads(data)
        assert fresh.address is not None and fresh.read(ctx, [refs[1].blob_key]) == [data.read_blob(ctx, blob_key=refs[1].blob_key)]
        for name, call in calls.items():
            print(f"{name:45s} {timed(call)}", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
