"""The fixture corpus probed by warm workers, two at a time (torch imported once per worker, one forked
child per fixture): shared by the probe's fixture tests and the agreement test."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fixture_corpus import all_fixtures
from gradguard.probe import ProbeOptions, ProbeWorker

FIXTURES = all_fixtures()
# Bugs only the probe can see (tests/fixtures/probe_only/README.md): out of the analyzer's corpus, checked by
# tests/probe/test_probe_lines.py.
PROBE_ONLY = all_fixtures(Path(__file__).parent / "fixtures" / "probe_only")

# Positives the probe does not confirm at their marked line yet, by why (issue 14, probe side).  Both the probe's fixture test
# and the agreement test read this; an entry the probe starts confirming fails them (delete it then).
PROBE_BLIND: dict[str, str] = {
    **{f"GG001/{name}": (
        "a custom Function's forward writes its input after `ctx.save_for_backward`: torch packs the saved tensors "
        "only when the forward returns, so no version moves between the save and the write, nothing raises, and the "
        "tracer, which watches saved tensors' versions, sees nothing") for name in (
        "pos_function_forward_scales_saved_input_in_place", "pos_function_forward_clamps_saved_input_then_returns_it")},
    **{f"GG101/{name}": (
        "the copy is dropped by a local name's rebinding: the probe learns what was stored in its place only from an "
        "attribute store (`holder.name = value`, probe/synced.py), so it has no module to compare with the loaded "
        "weights") for name in ("pos_loaded_copy_replaced_target_network_locals",
                                "pos_loaded_copy_returned_by_sync_helper")},
    **{f"GG102/{name}": (
        "`w.data = f(w)` in a forward rebinds the parameter's storage to values whose graph is dropped: no saved "
        "tensor changes and no version moves, so the tracer, which watches saved tensors and versions, sees nothing")
       for name in ("pos_forward_weight_data_masked_from_itself", "pos_forward_helper_weight_data_normalized",
                    "pos_forward_gain_data_clamped_from_itself_loop")},
    "GG103/pos_deepcopy_finetuned_with_original_optimizer": (
        "the probe sees the copy's parameters starved of updates at the forward that uses them, not the deepcopy "
        "that made them apart from the optimizer's"),
    "GG103/pos_copy_and_original_optimizer_passed_to_fit": (
        "the probe sees the copy's parameters starved of updates at the forward inside the helper, not the call "
        "that hands the copy the original's optimizer"),
    "GG103/pos_guarded_unfreeze_after_module_freeze": (
        "the backbone is frozen by the module's `requires_grad_(False)`, not by a guarded flag write: the probe "
        "notes only the freezes of guarded writes, so it does not see the later guard skip those parameters"),
    **{f"GG103/{name}": (
        "the copy read through `.data` gets part of it written back with values that keep the old history: torch "
        "raises nothing, and the tracer has no check that compares which parts of a tensor carry a graph")
       for name in ("pos_data_clone_memory_masked_rows_rewritten", "pos_data_clone_state_rows_rewritten_in_loop")},
    **{f"GG001/{name}": (
        "torch.compile raises inside dynamo's compilation, at the compiled module's call: the tracer does not see "
        "the ops dynamo traces, so it has no save and no write to name")
       for name in ("pos_compiled_forward_keeps_statistic_then_writes_input",
                    "pos_compiled_layer_keeps_variance_on_tracker", "pos_module_compiled_in_place_keeps_norm")},
    **{f"GG103/{name}": (
        "the term is computed from a module's output made under no_grad and handed on through a helper's return "
        "or a list kept on the object: the tracer notes no cut there, and reports no term left without a graph")
       for name in ("pos_nograd_helper_output_whole_loss_term", "pos_nograd_values_kept_on_object_term")},
    "GG103/pos_aux_loss_detached_item_rebound_then_weighted": (
        "the number is read out of `adv.detach()`, which requires no grad: the tracer sees no value read out of a "
        "tensor that requires grad, and reports no cut `.detach()` whose term is then a constant"),
    **{f"GG001/{name}": (
        "the probe names the in-place write (the line after); the static analysis names the conversion to the dtype "
        "the tensor has already, which returns it instead of a copy (the line to change); the probe places a write at "
        "such a conversion only for a custom Function's input")
       for name in ("pos_to_same_dtype_then_clamp_in_forward", "pos_type_as_same_dtype_then_indexed_write",
                    "pos_helper_returns_noop_float_then_scaled")},
    "GG101/pos_representation_prepared_before_loop_kept_on_module": (
        "the probe names the step that rewrites the saved weights (line 36); the static analysis names the line that "
        "keeps the graph on the object across steps (the line to change)"),
    "GG109/pos_rebind_then_grad_zeroed_after_block": (
        "the run stops at `w.grad.zero_()` (AttributeError on the rebound tensor's missing gradient) before any "
        "backward runs through the rebound `w`: the tracer sees no autograd event to report"),
    "GG101/pos_td_error_helper_after_critic_step": (
        "the probe names the op inside the helper that mixes the values before and after the step (line 15); the "
        "static analysis the helper's call in the function that runs the step (the line to move before it)"),
    "GG101/pos_state_detached_after_inner_loop": (
        "the probe names the forward that uses the carried state; the static analysis the detach of that state, "
        "which runs only after the loop that steps (the line to change)"),
    "GG101/pos_hidden_detach_in_place_after_chunk_loop": (
        "the probe names the forward that uses the carried state; the static analysis the detach of that state, "
        "which runs only after the loop that steps (the line to change)"),
    "GG003/pos_bias_prior_written_through_bound_view": (
        "the probe names the first write that raises; the static analysis the binding of the view both writes go "
        "through (bound again under a condition, so the probe sees no one binding); `check --probe` merges them"),
    "GG003/pos_class_bias_view_picked_by_nested_nonlocal": (
        "the probe names the first write that raises; the static analysis the binding of the view both writes go "
        "through (bound again under a condition, `bias = bias.detach()`, so the probe sees no one binding); "
        "`check --probe` merges them"),
    "GG110/pos_grad_clip_result_dropped": (
        "an out-of-place op whose result is dropped changes nothing torch could observe: there is no write to see"),
    "GG110/pos_accumulated_grad_scale_dropped": (
        "an out-of-place op whose result is dropped changes nothing torch could observe: there is no write to see"),
    "GG001/pos_queue_buffer_read_then_enqueued": (
        "the probe places the finding at the in-place update of the buffer; the static analysis at the op that "
        "read the buffer by reference (the update is meant); `check --probe` merges them"),
    "GG001/pos_property_state_read_then_updated_in_place": (
        "the probe places the finding at the in-place update of the state; the static analysis at the op that "
        "read the state by reference (the update is meant); `check --probe` merges them"),
    "GG001/pos_running_scale_divides_then_updated": (
        "the probe places the finding at the in-place update of the buffer; the static analysis at the op that "
        "read the buffer by reference (the update is meant); `check --probe` merges them"),
    "GG101/pos_actor_critic_shared_trunk": (
        "the probe names the critic's step: the value used after it (log-probabilities) was computed from the trunk's "
        "output on a later line, so computing it again after the step would not help, and the fixture's own reference "
        "moves the step after the actor's backward; the static analysis names the first use after the step; "
        "`check --probe` reports both"),
    "GG101/pos_model_methods_second_backward_after_three_steps": (
        "the probe names the forward method's call before the steps (to run again after them), the static analysis "
        "the helper call after the steps whose loss builds on that forward's outputs; `check --probe` merges them"),
    "GG101/pos_actor_critic_method_update_critic": (
        "the probe names the trunk's forward before the step (the function calling both computes it again after), "
        "the static analysis the first use after the step of a value that forward made; `check --probe` merges them"),
    "GG005/pos_modules_loop_switches_inplace": (
        "the probe names the layer's constructor, not the later `m.inplace = True` that switched it to in-place"),
    "GG005/pos_named_children_hardtanh_switch_after_tanh": (
        "the probe names the layer's constructor, not the later `m.inplace = True` that switched it to in-place"),
    "GG005/pos_forward_hook_attribute_before_functional_relu": (
        "the probe reports the forward hook's keeping line as GG001 (a kept tensor changed in place, silent); the "
        "static analysis as GG005, the write being an in-place activation (`F.relu(..., inplace=True)`)"),
    "GG108/pos_forward_hook_zeroes_slice_of_query_table": (
        "the probe reports the hook's write as GG102 (a write under no_grad that changes a parameter a later graph "
        "reads); the static analysis as GG108, a hook writing what it is given"),
    "GG108/pos_forward_hook_scales_transposed_weight_output": (
        "the probe reports the hook's write as GG102 (a write under no_grad that changes a parameter a later graph "
        "reads); the static analysis as GG108, a hook writing what it is given"),
    "GG103/pos_input_gradient_cut_by_detach": (
        "the cut starves a `.grad` read of an input tensor, not an optimizer step: the probe watches steps only"),
}
# Expected lines a fixture's run does not reach (two writes of one memory, of which one run reaches one): the probe
# confirms the others; these it cannot see.  The static analysis finds both (tests/test_fixtures_analyzer.py).
PROBE_UNREACHED: dict[str, tuple[int, str]] = {
    "GG004/pos_split_head_maps_averaged_from_none": (
        15, "the loop's in-place add to a split piece raises at once (a multi-output view written in place), so the "
            "run never reaches the mean's in-place division after the loop"),
    "GG001/pos_saved_exp_written_in_branch_and_after": (
        10, "the branch that zeroes a row is decided by the data and not taken in this run"),
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
