"""The fixture corpus probed by warm workers, two at a time (torch imported once per worker, one forked
child per fixture): shared by the probe's fixture tests and the agreement test."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

from fixture_corpus import all_fixtures
from gradguard.probe import ProbeOptions, ProbeWorker

FIXTURES = all_fixtures()

# Silent positives the probe does not confirm yet, by why (issue 14, probe side).  Both the probe's fixture test
# and the agreement test read this; an entry the probe starts confirming fails them (delete it then).
_CUT = ("a `.detach()` that starves trained parameters is no write: the probe watches writes and saves, and "
        "would have to follow which parameters a backward reaches")
PROBE_BLIND: dict[str, str] = {
    **{f"GG103/{name}": _CUT for name in (
        "pos_detach_layer_in_sequential", "pos_feature_helper_returns_data", "pos_forward_returns_data_of_output",
        "pos_forward_returns_detached_features", "pos_head_fed_detached_backbone", "pos_helper_embed_detach",
        "pos_manual_sgd_detached_hidden", "pos_rnn_cell_state_detached_each_step",
        "pos_trainer_method_detached_latent", "pos_two_stage_forward_detach_between")},
}
WORKERS = max(1, min(2, os.cpu_count() or 1))
# On a GPU machine: GRADGUARD_PROBE_DEVICE=cuda python -m pytest tests/probe (same expectations).
DEVICE = os.environ.get("GRADGUARD_PROBE_DEVICE", "cpu")


def probe_corpus(fixtures=None) -> dict:
    """{"results": {fixture id: ProbeResult}, "startup": s, "probing": s} for every fixture (or ``fixtures``)."""
    fixtures = FIXTURES if fixtures is None else fixtures
    started = time.monotonic()
    workers = [ProbeWorker() for _ in range(WORKERS)]
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            for w in pool.map(lambda w: w.start(), workers):
                pass
            ready = time.monotonic()
            chunks = [fixtures[i::WORKERS] for i in range(WORKERS)]

            def probe_chunk(args):
                w, chunk = args
                options = ProbeOptions(entry="run", timeout=60, device=DEVICE)
                return [(fx.id, w.probe(fx.path, options)) for fx in chunk]

            results = {}
            for part in pool.map(probe_chunk, zip(workers, chunks)):
                results.update(part)
    finally:
        for w in workers:
            w.close()
    done = time.monotonic()
    return {"results": results, "startup": ready - started, "probing": done - ready}
