"""torch proves the fixes right: every positive fixture, fixed with the CLI, runs clean and gives the
gradients of its ``reference()``; the analyzer finds nothing in it; fixing twice changes nothing; fixing a
negative changes nothing.

A positive is fixed with ``gradguard check --fix`` (safe fixes only).  The ones whose fixes are all unsafe
are listed in ``UNSAFE_ONLY`` and fixed with ``--fix --unsafe-fixes`` instead (and the safe run must leave
them untouched); the ones without any fix are listed in ``NO_FIX`` and must really get none.  Both lists
say why, and the tests keep them honest in both directions.

Rules without a ``fix`` hook yet are skipped (their fixtures join automatically once the rule has one).
"""

from __future__ import annotations

import shutil
import warnings
from collections import Counter
from pathlib import Path

import pytest
from fixture_corpus import Fixture, all_fixtures
from gradguard.api import analyze_source
from gradguard.cli import main
from gradguard.config import Config
from gradguard.rules import RULES_BY_CODE
from gradients import grads_equal
from programs import load_program

torch = pytest.importorskip("torch")

FIXTURES = all_fixtures()


def _rule(fx: Fixture):
    return RULES_BY_CODE.get(fx.path.parent.name)


POSITIVES = [fx for fx in FIXTURES if fx.positive and _rule(fx) is not None and _rule(fx).fix is not None]
NEGATIVES = [fx for fx in FIXTURES if not fx.positive]

# Positives that get no fix at all, and why none is offered.
from test_fixtures_analyzer import KNOWN_MISSES

_GG102_INTO_GRAPH = "the write, put into the graph, now passes its gradient through the op, where it skipped it before"

_KEPT_ACROSS_STEPS = (
        "the object keeps the value across steps, prepared once by a method of its own rather than filled under an "
        "`if <it> is None:` cache: computing it anew on each call moves that computation into the forward, and "
        "keeping it detached stops the gradient through it; which one is meant is the author's choice")

_DROPPED_HOOK_OUTPUT = (
    "the hook rebinds its output and returns nothing: returning the new value changes what the hook does, which no "
    "rewrite of a hook makes")

_GRAD_MODE_BACK_ON = (
    "grad mode is switched off for what follows, or by the decorator of a function called from outside: where it "
    "should come back on is the author's choice: no fix yet")

_GUARD_KEPT_OTHERS_FROZEN = (
    "the parameters were frozen by other code than the guarded write: dropping the guard would also unfreeze "
    "parameters frozen on purpose (whether any are is the author's to say)")

_RECOMPUTE_WITH_GRAD = (
    "the value was computed with grad mode off where it is meant to be (acting, scoring): the loss should "
    "compute it again with grad mode on, from inputs only the author knows to keep: no fix yet")

_SAVED_APART = ("saving the module and the optimizer together restructures both the save and the load (a class's "
                "`__getstate__` and `__setstate__`), which no fix does")
_NUMBER_BESIDE_TENSORS = (
    "`torch.tensor([0, amp])` writes a number beside the tensors: `torch.stack` takes tensors of one shape only, "
    "and how the number becomes one (its dtype, the tensors' shape) is the author's choice")
_LIST_THROUGH_PARAMETER = (
    "the list reaches `torch.tensor` through a parameter (a helper's, a setter's): other callers may pass numbers, "
    "which `torch.stack` does not take, so the rebuild stays the author's to change")
NO_FIX = {
    "GG102/pos_numpy_views_listed_then_clipped_in_loop": (
        "the arrays are written one by one through a loop over a list of them: the write is not out of place "
        "anywhere a rewrite of one statement reaches"),
    "GG103/pos_nograd_output_copied_into_buffer_term": _RECOMPUTE_WITH_GRAD,
    "GG103/pos_nograd_helper_output_whole_loss_term": _RECOMPUTE_WITH_GRAD,
    "GG103/pos_nograd_values_kept_on_object_term": _RECOMPUTE_WITH_GRAD,
    "GG103/pos_guarded_unfreeze_after_module_freeze": _GUARD_KEPT_OTHERS_FROZEN,
    "GG103/pos_generator_over_objects_of_two_classes_tensor_piece": _NUMBER_BESIDE_TENSORS,
    "GG103/pos_loop_over_spread_pieces_tensor_piece": _NUMBER_BESIDE_TENSORS,
    "GG103/pos_builtin_sum_of_scores_numpy_context": (
        "the NumPy sums are appended to a list in a loop and stacked by NumPy before the rebuild: the round trip "
        "spans a loop and a list, which no rewrite of one statement turns into torch ops"),
    "GG101/pos_model_methods_second_backward_after_three_steps": (
        "the forward is a method that keeps its outputs on the object: calling it again before the second loss's "
        "helper is the change, and no fix adds a call"),
    "GG101/pos_representation_prepared_before_loop_kept_on_module": _KEPT_ACROSS_STEPS,
    "GG003/pos_wrapper_pins_inner_embedding_row_then_calls_it": (
        "the network whose weight row is written is called afterwards (`net(idx)`), reading that weight without "
        "naming it: a copy read in place of `net.emb.weight` would leave that call the unwritten row"
    ),
    "GG003/pos_param_row_pinned_then_read_by_own_method": (
        "a method of the layer called after the write (`self.project(x)`) reads the weight without naming it: a copy "
        "read in place of `self.weight` would leave that method the unwritten row"
    ),
    "GG003/pos_linear_subclass_pins_row_then_calls_super_forward": (
        "the base class's forward called after the write (`super().forward(x)`) reads the weight without naming it: "
        "a copy read in place of `self.weight` would leave it the unwritten row"
    ),
    **{f"GG001/{name}": (
        "the written output is handed from layer to layer of a ModuleList built by a comprehension, which the "
        "analysis runs as one layer: the later layers' saves of it are not known, so a clone at the saves it knows "
        "would leave theirs (no clone fix is offered), and the write is through a group no rebinding reaches")
       for name in ("pos_layer_list_output_read_by_next_layer_scaled_in_helper",
                    "pos_block_list_output_read_by_next_block_scaled_in_place")},
    "GG001/pos_sliced_comprehension_batches_input_normalized": (
        "`x` is an element of the caller's list of batches: rebinding it leaves the list's tensor unscaled for its "
        "later readers, so no safe rewrite exists where the write is"
    ),
    "GG103/pos_helper_grows_embedding_optimizer_passed_in": (
        "the helper swaps in an embedding of other shapes: handing its weight to the optimizer (`add_param_group`) "
        "is the change, which no fix adds"
    ),
    "GG103/pos_context_manager_swaps_head_after_optimizer": (
        "the head is swapped inside a context manager: building the optimizer inside the block (or handing it the "
        "new head's parameters) moves a statement into the block or changes the context manager, which no fix does"
    ),
    "GG103/pos_optimizer_built_in_timed_block_before_layer_swap": (
        "the optimizer is built inside a block of the file's own context manager: moving the block after the swap "
        "moves what its entry and exit do too, which no fix does"
    ),
    "GG103/pos_helper_class_rebuilds_layer_with_copied_weights": (
        "the layer is rebuilt (with new values) by a helper object's method: copying the values into the existing "
        "parameters instead rewrites the assignment into a copy, which no fix does yet"
    ),
    "GG001/pos_property_state_read_then_updated_in_place": (
        "the op reads the state through a `@property` (`self.slot.current`) while the write names the attribute "
        "(`self._memory`): the fix finds the read by the written attribute's name, and the facts that would tie the "
        "two together (who holds the storage) are issue 26's sharing facts"
    ),
    "GG103/pos_forward_hook_method_rebinds_scaled_output": _DROPPED_HOOK_OUTPUT,
    "GG103/pos_forward_hook_rebinds_output_in_loop_of_masks": _DROPPED_HOOK_OUTPUT,
    "GG103/pos_regularizer_detaches_data_copies_of_parameters": (
        "the values are cut twice (`.data`, then `.detach()` of what it gave): dropping one cut leaves the other, "
        "so the rewrite of `.data` alone does not remove the finding and is withheld"
    ),
    "GG103/pos_grad_disabled_for_preprocessing_then_fit": _GRAD_MODE_BACK_ON,
    "GG103/pos_np_array_of_loss_pair_in_helper": (
        "keeping the gradient (the torch twin of the NumPy function) or dropping it (`.detach()`, values for a log) "
        "is the author's choice: no fix yet"
    ),
    "GG103/pos_no_grad_decorated_loss_helper_reused_in_training": _GRAD_MODE_BACK_ON,
    "GG103/pos_meta_learner_steps_from_constructor_last_loss_no_grad": (
        "the `no_grad` block takes gradients: dropping it leaves them without a graph (first order), where the loss "
        "built on them means to differentiate through them (`create_graph=True`): the author's choice"),
    "GG103/pos_deepcopy_finetuned_with_original_optimizer": (
        "which module should train is the author's choice (an optimizer over the copy, or the original trained): "
        "building one moves a statement across the program, which no fix does"
    ),
    "GG103/pos_getstate_saves_module_and_optimizer_apart": _SAVED_APART,
    "GG103/pos_setstate_loads_each_attribute_from_its_own_bytes": _SAVED_APART,
    "GG103/pos_getstate_writes_members_to_checkpoint_files": _SAVED_APART,
    "GG103/pos_model_and_optimizer_loaded_from_separate_buffers": _SAVED_APART,
    "GG103/pos_copy_and_original_optimizer_passed_to_fit": (
        "the copy needs an optimizer of its own, built before the call from the copy bound to a name, which no fix "
        "builds"
    ),
    "GG103/pos_weight_parameter_set_by_name_after_optimizer": (
        "the new weight has the old one's shape: writing the values into the existing parameter under no_grad is "
        "the change, and no fix rewrites a `setattr` of a new Parameter into a copy"
    ),
    "GG101/pos_module_state_carried_across_steps": (
        "the state lives on the module (`self.hidden`), written in its forward: cutting it between steps needs a "
        "method of the class or an attribute write from the loop, which no fix adds"
    ),
    "GG101/pos_stale_fakes_reused_by_helper_after_step": (
        "the fakes are made by another method (`forward()`) the caller runs; making them again before the second "
        "helper means calling it there with the images it kept, a change to the class no fix rewrites"
    ),
    "GG108/pos_forward_hook_scales_transposed_weight_output": (
        "the write is in a helper a forward hook calls, on the hook's output, a view of a parameter: the clone "
        "belongs in the hook, which a rewrite of the helper cannot place"
    ),
    "GG103/pos_critic_items_appended_also_advantage_constants": (
        "the numbers are also constants of the advantages: appending the tensors would put the critic's graph into "
        "the policy loss, and where a `.detach()` belongs there is the author's to say"
    ),
    "GG103/pos_type_in_list_tuple_setter_torch_tensor": _LIST_THROUGH_PARAMETER,
    "GG103/pos_type_is_list_plain_function_raises": _LIST_THROUGH_PARAMETER,
    "GG103/pos_type_not_tensor_elif_chain_tuple": _LIST_THROUGH_PARAMETER,
    "GG103/pos_type_is_tensor_not_parameter_scaled": _NUMBER_BESIDE_TENSORS,
    "GG103/pos_numpy_mean_of_item_losses_backward": (
        "the numbers are averaged by NumPy and `.backward()` is called on NumPy's result: keeping tensors means "
        "changing the list's elements, the mean and the backward's receiver together, which no rewrite does yet"
    ),
    "GG105/pos_buffers_reset_inside_inference_mode": (
        "the reset is to move out of the inference_mode block: moving a statement out of a block changes what runs "
        "under it, which no rewrite decides for the user"
    ),
    "GG001/pos_dict_of_activations_mutated": (
        "the tensor is an element of a dict; the rewrites name tensors, not container elements (a clone of the "
        "dict's name would be wrong), so none is offered"
    ),
    "GG002/pos_global_leaf_written_in_function": (
        "the leaf is a module global written inside a function; `torch.no_grad()` would hide the update from the "
        "gradient the reference computes, and rebinding a global needs a `global` statement the fix layer does not write"
    ),
    "GG003/pos_prune_input_column_in_forward": (
        "`self.fc(x)` reads `self.fc.weight` inside the module: a masked copy of the weight cannot reach it "
        "without rewriting the call as `F.linear`, and `torch.no_grad()` would change the gradients"
    ),
    "GG004/pos_chunk_output_view_add": (
        "the write must reach `t` (read later) through a view of a chunk; `chunk`'s piece sizes depend on the "
        "shape, so it cannot be turned into a plain slice, and rebinding the piece would drop the write"
    ),
    "GG004/pos_chunk_first_piece_shifted_then_read_from_tuple": (
        "the tuple of chunks is read again after the write, at the written chunk: rebinding the name out of place "
        "would show that read the chunk without the shift"
    ),
    "GG004/pos_split_pieces_summed_first_read_again": (
        "the sum starts as the first piece, which the loss reads again after the loop: rebinding the sum out of "
        "place would show that read the piece without the additions"
    ),
    "GG102/pos_forward_weight_data_masked_from_itself": (
        "`w.data = f(w)` read by a layer's call as its own weight (`self.conv(x)`): running the layer with `f(w)` "
        "(`torch.func.functional_call`) proves here, but the real DPF pruning case reads a mask's product the same "
        "way and its own fix passes the gradient straight through: which one the code means cannot be told"
    ),
    "GG101/pos_actor_critic_method_update_critic": (
        "the step is inside a method called between forward and backward; moving the step would re-run a freed graph or change which weights the generator sees; the structural fix (`D(fake.detach())` for the discriminator step, then recompute `D(fake)` for the generator) is not offered automatically yet"
    ),
    "GG101/pos_actor_critic_shared_trunk": (
        "the update can only move after the backward across other statements, which was proven wrong on the GAN/helper fixtures; no safe condition to tell them apart yet"
    ),
    "GG101/pos_no_grad_weight_clip_in_forward": (
        "the clip runs inside forward, between the layer and the caller's backward: needs a restructure (a fresh forward after the update, or a detach at the chunk boundary) that is not implemented"
    ),
    "GG102/pos_trainer_standardize_features_alias": (
        "the hidden write (a chain `sub_(...).div_(...)`) is inside a helper method; putting it in the graph means the helper returns the new tensor and every caller rebinds it, which the fix layer does not prove yet"
    ),
    "GG105/pos_feature_snapshot_cache_lerp": (
        "the view is made in one loop iteration and written in a later one"
    ),
}

# Positives whose only fixes are unsafe, and what makes them unsafe.
UNSAFE_ONLY = {
    **{f"GG001/{name}": "the loop's name now holds the rewritten copy: the list the code took it from still holds "
                        "the tensor as it was, for a caller or a later read of that list" for name in (
        "pos_backbone_last_features_shifted_by_head", "pos_encoder_hidden_states_tail_scaled_inplace",
        "pos_pyramid_all_but_last_level_sigmoid_written")},
    **{f"GG005/{name}": "every module the constructor builds runs out of place, whatever the flag it reads says "
                        "(its other uses keep their values, not their memory saving)" for name in (
        "pos_leaky_relu_module_negative_slope_inplace", "pos_inplace_flag_class_attribute",
        "pos_inplace_flag_through_constructor", "pos_layers_list_grown_dropout_after_sigmoid",
        "pos_inplace_relu_from_config_after_sigmoid", "pos_module_global_flag_read_by_builder_of_trainer")},
    **{f"GG005/{name}": "every module the `.inplace = True` assignment reaches now runs out of place, also one whose "
                        "caller relied on its input being overwritten" for name in (
        "pos_modules_loop_switches_inplace", "pos_named_children_hardtanh_switch_after_tanh")},
    "GG003/pos_helper_writes_block_into_argument_leaf": (
        "the helper now writes a copy of its argument: a call from another file that reads the tensor it passed "
        "after the call would not see the block"),
    **{f"GG001/{name}": "the Function's forward now leaves its input as it was: a caller that relied on the write "
                        "would see the old values"
       for name in ("pos_function_forward_scales_saved_input_in_place",
                    "pos_function_forward_clamps_saved_input_then_returns_it")},
    "GG001/pos_function_backward_writes_saved_sigmoid_output": (
        "the backward now writes a copy of the tensor `ctx.saved_tensors` gave it: whatever else holds that tensor "
        "keeps its values"),
    **{f"GG001/{name}": "the detached name now holds a copy: the tensor it was taken from keeps its values"
       for name in ("pos_detach_alias_zeroed_then_original_summed", "pos_detach_alias_rows_masked_in_method")},
    **{f"GG103/{name}": "the copy is handed a deep copy of the optimizer over its parameters: it starts with the "
                        "original's state, and copies any parameter the optimizer holds outside the copied module"
       for name in ("pos_learner_spawn_type_self_shares_optimizer", "pos_forked_trainer_keeps_adamw_of_original",
                    "pos_ensemble_member_copied_with_grouped_optimizer")},
    **{f"GG103/{name}": "the optimizer is built after the replacement: it no longer holds the replaced parameters, "
                        "which code the analysis does not see may still train"
       for name in ("pos_optimizer_made_before_helper_swaps_layers", "pos_pruner_class_replaces_convs_after_optimizer",
                    "pos_setattr_over_named_children_after_optimizer", "pos_head_replaced_after_optimizer",
                    "pos_optimizer_built_under_switch_before_head_swap")},
    "GG103/pos_np_mean_of_head_losses": "the result keeps the gradient, where values meant only for a log would "
                                        "be `.detach()`ed",
    **{f"GG103/{name}": "the guard is dropped: a call of the setter on a module frozen by other code would unfreeze "
                        "it too" for name in ("pos_guarded_unfreeze_method_keeps_encoder_frozen",
                                              "pos_guarded_unfreeze_helper_requires_grad_call",
                                              "pos_guarded_unfreeze_mixin_base_given_to_factory")},
    **{f"GG103/{name}": "the `no_grad` block is dropped: every op in it then records a graph, and a value meant to "
                        "stay out of the gradient goes into it"
       for name in ("pos_loss_computed_in_no_grad_block", "pos_int_stage_runs_loss_without_grad",
                    "pos_functional_forward_with_weight_list_under_no_grad",
                    "pos_no_grad_eval_losses_list_last_entry_backward",
                    "pos_loss_in_no_grad_block_with_stacked_offsets")},
    "GG001/pos_softmax_scores_masked_then_scaled_by_two_helpers": (
        "the helper returns the written tensor and its calls here rebind it; calls from other files may still expect "
        "the write"
    ),
    "GG001/pos_alias_of_input_written_then_input_decoded_again": (
        "the caller reads the written argument again after the call (the run shows it): with the helper's write out "
        "of place the second decoder reads the latent the first one's projection saved, not the one it wrote"
    ),
    **{f"GG101/{name}": "the assignment that replaced the loaded copy is removed: code relying on the two names "
                        "holding one module changes" for name in ("pos_loaded_copy_replaced_target_network_locals",
                                                                  "pos_loaded_copy_replaced_agent_sync_method",
                                                                  "pos_loaded_copy_returned_by_sync_helper")},
    **{f"GG101/{name}": "the gradients are cleared before the backward: gradients meant to add up across steps no "
                        "longer do" for name in ("pos_stale_grads_zero_grad_before_loop_only",
                                                 "pos_stale_grads_gan_discriminator_keeps_generator_gradients",
                                                 "pos_stale_grads_helper_update_without_clear",
                                                 "pos_stale_grads_one_of_two_models_cleared")},
    "GG001/pos_batch_tuple_features_rewritten_between_passes": (
        "the features are copied before the write: the tuple keeps the old values, where the write used to change them"
    ),
    "GG002/pos_leaf_scaled_then_shifted_in_place": "computes on a copy: the leaf keeps its old value",
    "GG103/pos_aux_loss_detached_item_rebound_then_weighted": "the line is deleted so `adv` keeps its tensor: any "
                                                              "other use of the name then gets the tensor, not a number",
    **{f"GG103/{name}": "the list holds tensors where it held numbers, for every reader of it"
       for name in ("pos_critic_values_item_appended_stacked_in_loss",
                    "pos_batch_losses_float_appended_summed_backward",
                    "pos_episode_values_item_on_object_rebuilt_in_update",
                    "pos_rollout_values_read_then_rebuilt_in_loss")},
    "GG103/pos_legacy_tensor_of_losses": "`torch.stack` keeps the losses' dtype and device, where the legacy "
                                         "`torch.Tensor([...])` made a CPU tensor of the default dtype",
    **{f"GG001/{name}": "the conversion now copies: the tensor it was given keeps its values, where the writes used "
                        "to change it too" for name in ("pos_function_forward_float_noop_then_isub",
                                                        "pos_to_same_dtype_then_clamp_in_forward",
                                                        "pos_type_as_same_dtype_then_indexed_write",
                                                        "pos_helper_returns_noop_float_then_scaled")},
    "GG101/pos_hidden_detach_in_place_after_chunk_loop": "the state is detached at the top of each step and "
                                                         "retain_graph dropped: each backward now stops at its step's "
                                                         "start (truncated BPTT per step, as the reference)",
    **{f"GG001/{name}": "the helper now leaves its argument as it was: a caller this analysis did not run may have "
                        "read it after the call" for name in (
        "pos_helper_soft_clip_sub_inplace_argument", "pos_mixer_method_residual_iadd_nested_forwards",
        "pos_normalize_helper_idiv_in_training_loop", "pos_forward_adds_embedding_through_alias_of_input",
        "pos_state_pair_unpacked_then_accumulated_in_helper")},
    "GG004/pos_piece_of_argument_squashed_in_helper": "the helper now leaves its argument as it was: a caller this "
                                                      "analysis did not run may have read it after the call",
    "GG004/pos_full_backward_hook_on_block_looked_up_by_name": "the ReLU, held in a `ModuleDict` applied by name, "
                                                                "no longer saves memory by writing in place",
    "GG001/pos_quadrants_written_into_input_alias": "the input keeps its values: a caller that relied on the writes "
                                                    "changing it sees the old ones",
    "GG101/pos_lstm_cell_state_from_zeros_carried": "each backward now stops at its step's start (truncated BPTT): "
                                                    "no gradient flows into earlier steps, as the loop meant",
    **{f"GG005/{name}": "the hook returns a copy of the output for the network to go on with: what it keeps holds "
                        "the layer's values, not the in-place activation's" for name in (
        "pos_hooks_on_named_layers_from_name_list", "pos_hooks_on_named_children_tuple_of_names",
        "pos_forward_hook_dict_keeps_conv_output", "pos_forward_hook_list_grad_asked_of_kept_output",
        "pos_forward_hook_attribute_before_functional_relu")},
    "GG005/pos_weight_norm_layer_in_sequential": "the dropout is built inside a list spread into a Sequential: the fix "
                                                 "cannot see every place the module is applied",
    "GG001/pos_no_grad_clamp_probs": "the clamp leaves the no_grad block: its gradient now goes through it",
    "GG105/pos_method_decorated_returns_chunk": "the method loses `@torch.no_grad()`: every caller's views get history",
    "GG104/pos_threshold_double_loop_on_leaf": "the loops write a copy of the leaf made before them; the leaf keeps its values",
    "GG104/pos_module_causal_weight_mask_loop": (
        "the loops write a copy of the weight made before them, which forward reads; the parameter keeps its values"
    ),
    "GG103/pos_scale_parameter_reassigned_after_optimizer": "the values are written into the old parameter: they "
    "take its shape, dtype and device, and whatever else holds it sees them",
    "GG103/pos_training_step_logs_loss_returns_nothing": "whether the tensor returned is the loss to train on is "
    "the author's to say",
    "GG103/pos_training_step_shared_step_inherited_hooks": "whether the tensor returned is the loss to train on is "
    "the author's to say",
    "GG103/pos_float_loss_requires_grad": "the result is `loss` itself, not a new leaf whose `.grad` torch fills",
    "GG103/pos_detach_in_place_state_already_used": "what was computed from `h` before keeps its whole history: "
                                                    "no truncation happens there",
    "GG103/pos_tolist_rebuild_scores": "the result is `scores` itself, with its dtype and device, not a rebuilt CPU tensor",
    "GG103/pos_numpy_aux_term_roundtrip": "torch ops replace NumPy's, whose dtype promotion and rounding may differ",
    "GG103/pos_numpy_clip_roundtrip": "torch ops replace NumPy's, whose dtype promotion and rounding may differ",
    "GG103/pos_numpy_slice_statistic_rebuilt": "torch's `.std(correction=0)` replaces the array's `.std()`, whose "
                                               "dtype promotion and rounding may differ",
    "GG103/pos_numpy_round_trip_in_method": "torch ops replace NumPy's; the result is no longer a new leaf",
    "GG103/pos_np_mean_of_item_losses_requires_grad": (
        "the losses are stacked and averaged in torch: float32 where NumPy averaged in float64, and the result is "
        "no longer a new leaf"),
    "GG103/pos_np_sum_of_numpy_losses_requires_grad": (
        "torch sums where NumPy did (its dtype promotion and rounding may differ); the result is no longer a new leaf"),
    "GG103/pos_trainer_sum_of_items_generator": (
        "the sum of the loss tensors replaces a new leaf made of their numbers: it keeps their dtype and device"),
    "GG102/pos_inference_mode_clip_logits": _GG102_INTO_GRAPH,
    **{f"GG102/{name}": "`f(w)` is computed in the graph and read in place of `w`, which keeps its own values: the "
                        "gradient goes through `f`, and `w` is no longer changed" for name in (
        "pos_forward_helper_weight_data_normalized", "pos_forward_gain_data_clamped_from_itself_loop")},
    "GG102/pos_data_scale_forward_output": _GG102_INTO_GRAPH,
    "GG102/pos_data_channels_normalised_from_data": _GG102_INTO_GRAPH,
    "GG102/pos_detach_mask_scaled_from_detach": _GG102_INTO_GRAPH,
    "GG102/pos_data_temperature_scores": _GG102_INTO_GRAPH,
    "GG102/pos_detach_alias_clamp_encoder_output": _GG102_INTO_GRAPH,
    "GG102/pos_nograd_gate_scale_hidden": _GG102_INTO_GRAPH,
    "GG102/pos_nograd_zero_padding_hidden": _GG102_INTO_GRAPH,
    "GG102/pos_rnn_reset_through_detach_alias": _GG102_INTO_GRAPH,
    **{f"GG102/{name}": _GG102_INTO_GRAPH for name in (
        "pos_legacy_tensor_product_zeroed_through_detach", "pos_detach_alias_column_masked_in_helper",
        "pos_detach_alias_scores_scaled_before_softmax")},
    "GG102/pos_set_grad_enabled_center_outputs": _GG102_INTO_GRAPH,
    "GG102/pos_numpy_view_clip_activation": _GG102_INTO_GRAPH,
    "GG102/pos_data_copy_mix_teacher": _GG102_INTO_GRAPH,
    "GG102/pos_numpy_view_mask_padding_loop": _GG102_INTO_GRAPH,
    "GG102/pos_nograd_helper_normalize_embeddings": _GG102_INTO_GRAPH + "; `emb` is rebound to what the helper returns",
    "GG102/pos_nograd_method_clip_latent": _GG102_INTO_GRAPH + "; `z` is rebound to what the method returns",
    "GG102/pos_numpy_view_zero_negative_scores": _GG102_INTO_GRAPH + "; `scores` is rebound to what the helper returns",
    "GG107/pos_embedding_scale_after_retain_grad": "the caller's `keep` list holds `emb`, which now keeps its unscaled values",
    "GG105/pos_transpose_tied_weight_scaled": "`emb.weight` is no longer scaled in place: only the tied projection is",
    "GG105/pos_helper_decorated_returns_view": "every call of the helper now gets views with history",
    "GG105/pos_helper_with_block_returns_transpose": "every call of the helper now gets views with history",
    "GG106/pos_helper_writes_into_caller_buffer": "the caller's `out` buffer no longer receives the sum",
    "GG106/pos_module_cat_into_registered_buffer": "the registered buffer `self.joined` gets a new tensor, with its graph",
    "GG002/pos_legacy_variable_leaf_iadd": "computing on a copy leaves the leaf at its old value for later readers",
    "GG003/pos_einops_rearrange_of_leaf": "computing on a copy leaves the leaf at its old value for later readers",
    **{f"GG101/{name}": "the kept value, computed anew on each call, is computed again at every call, and its "
                        "gradients flow at every step" for name in (
        "pos_prototypes_cached_on_module_with_graph", "pos_cache_filled_lazily_on_holder_object")},
    **{f"GG101/{name}": "the mixed value, computed before the update, changes, and so does the loss it weighs"
       for name in ("pos_td_error_after_critic_step_detached", "pos_agent_advantage_annotated_after_value_step",
                    "pos_agent_advantage_after_value_updates_loop", "pos_td_error_helper_after_critic_step")},
    **{f"GG101/{name}": "the step, moved below the later backward, also applies the gradients that backward gives "
                        "its parameters" for name in ("pos_value_step_before_detached_target_reused",
                                                      "pos_agent_lambda_returns_detached_for_critic_step",
                                                      "pos_critic_step_before_guarded_generator_backward",
                                                      "pos_value_step_before_policy_loss_in_loop")},
    "GG101/pos_two_steps_then_second_loss_on_shared_forward": "the code and the sample computed again after both "
                                                              "steps see the updated encoder and generator",
    "GG101/pos_shared_optimizer_zero_filled_grads_step": "the actor's forward computed again after the step sees the "
    "weights the step updated",
    "GG101/pos_gan_no_detach_shared_d_output": "`D(fake)` computed again after the step sees the updated discriminator",
    "GG101/pos_shared_generator_optimizer_two_steps_before_d_fake": "the fake computed again after both generator "
                                                                    "steps comes from the updated generator",
    "GG101/pos_built_mlp_critic_step_before_policy_backward": "the policy's loss computed again after the step sees "
                                                              "the updated critic",
    "GG101/pos_comprehension_params_step_before_actor_backward": "the actor's loss computed again after the step "
                                                                 "rolls out through the updated model",
    "GG101/pos_gan_labels_made_after_forwards": "`D(fake)` computed again after the step sees the updated discriminator",
    "GG101/pos_ema_helper_called_before_backward": "the teacher's forward, moved after the EMA update, sees the updated teacher",
    **{f"GG101/{name}": "the loss, moved below the call that updates the other network and backpropagated by a later "
                        "call, now sees the updated weights" for name in (
        "pos_actor_loss_before_critic_update_helper", "pos_agent_method_policy_loss_before_value_update",
        "pos_two_critic_updates_manual_sgd_helper")},
    "GG101/pos_gan_g_logits_before_d_step": "the generator's forward, moved after the step, now sees the updated discriminator",
    "GG101/pos_gan_helper_train_discriminator": "the generator's forward, moved after the step, now sees the updated discriminator",
    "GG101/pos_wgan_clip_helper_after_generator_forward": "the generator's forward, moved after the step, now sees the updated discriminator",
    "GG101/pos_context_manager_restores_weights_before_backward": "the backward, moved into the `with` block, runs "
    "before the context manager's exit, which then sees the gradients it gave",
    "GG101/pos_same_loss_backward_twice_step_between": "the loss is backpropagated once: a gradient no "
    "`zero_grad()` between the two backwards cleared holds one backward's, not two",
    "GG101/pos_state_detached_after_inner_loop": "the detach, moved to the end of the loop that steps, cuts "
    "the state after each step: each backward stops at the start of its step",
    **{f"GG101/{name}": "the carried value is computed again after the step: that forward runs again, with the "
                        "updated weights" for name in ("pos_loop_carried_features_before_step",
                                                       "pos_loop_carried_state_from_agent_method")},
    "GG101/pos_tbptt_retain_graph_without_detach": "detaching the carried state truncates backpropagation between chunks",
    "GG101/pos_dataclass_holder_critic_step_before_actor_backward": "the actor's loss computed again after the step "
                                                                     "sees the updated critic",
    "GG101/pos_multitask_loop_over_task_losses": "each task's loss, computed in the loop, sees the weights the steps before it updated",
    "GG001/pos_categorical_logits_mask": "`Categorical(logits=logits)` may keep `logits`; the distribution is used later",
    "GG001/pos_conv_input_clamp": "`x` is forward's argument: the caller's tensor is no longer clamped",
    "GG001/pos_layernorm_input_cls_zero": "`x` is forward's argument: the caller's tensor is no longer written",
    "GG001/pos_loop_rnn_carried_mul": "`outputs` holds earlier states, which no longer see the decay",
    "GG001/pos_prenorm_residual_iadd": "`x` is forward's argument: the caller's tensor is no longer updated",
    "GG001/pos_prenorm_two_sublayers": "`x` is forward's argument: the caller's tensor is no longer updated",
    "GG001/pos_zero_method_hidden_reset": "`outs` holds the state, which is no longer zeroed there",
    "GG002/pos_clamp_weight_in_forward": "computes on a clamped copy: the parameter keeps its old value",
    "GG002/pos_iadd_on_requires_grad_leaf": "computes on a copy: the leaf keeps its old value",
    "GG002/pos_index_tensor_assign_on_table": "computes on a copy: the leaf keeps its old value",
    "GG002/pos_mask_assign_on_leaf": "computes on a copy: the leaf keeps its old value",
    "GG002/pos_mask_iadd_on_leaf": "computes on a copy: the leaf keeps its old value",
    "GG002/pos_param_decay_in_forward": "computes on a copy: the parameter keeps its old value",
    "GG002/pos_saliency_normalize_after_requires_grad": "computes on a copy: the leaf keeps its old value",
    "GG003/pos_T_property_mul": "computes on a copy: the leaf keeps its old value",
    "GG003/pos_block_zero_on_leaf": "computes on a copy: the leaf keeps its old value",
    "GG003/pos_column_iadd_on_leaf": "computes on a copy: the leaf keeps its old value",
    "GG003/pos_diagonal_zero_in_forward": "computes on a copy: the parameter keeps its old value",
    "GG003/pos_flat_view_index_on_leaf": "computes on a copy: the leaf keeps its old value",
    "GG003/pos_frozen_embedding_hooked_output_rows_copied": "computes on a copy: the leaf keeps its old value",
    "GG003/pos_frozen_linear_output_made_leaf_column_scaled": "computes on a copy: the leaf keeps its old value",
    "GG003/pos_narrow_zero_on_leaf": "computes on a copy: the leaf keeps its old value",
    "GG003/pos_param_row_in_forward": "computes on a copy: the parameter keeps its old value",
    "GG003/pos_requires_grad_then_channel_scale": "computes on a copy: the leaf keeps its old value",
    "GG003/pos_row_assign_on_leaf": "computes on a copy: the leaf keeps its old value",
    "GG003/pos_transpose_add_on_leaf": "computes on a copy: the leaf keeps its old value",
    **{f"GG001/{name}": "the name rebound out of place is declared `nonlocal` or `global` (or a nested function "
                        "rebinds it): code that holds the old tensor under another scope's name keeps its old values"
       for name in ("pos_accumulator_reset_by_closure_under_helper_branch", "pos_global_rebound_in_loop_that_may_not_run",
                    "pos_nonlocal_rebound_in_closure_branch_then_written")},
    "GG104/pos_rnn_states_buffer_requires_grad": (
        "the states go in a list and `torch.stack`: `states` takes the steps' dtype and shape, and is no longer a "
        "leaf whose `.grad` torch fills"
    ),
}


def _fix(path: Path, *flags: str) -> int:
    return main(["check", "--no-jedi", "--jobs", "1", "--quiet", "--exit-zero", *flags, str(path)])


def _copy(fx: Fixture, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    target = folder / fx.path.name
    shutil.copyfile(fx.path, target)
    return target


def _findings(text: str, path: Path):
    return analyze_source(text, str(path), Config(jedi=False)).diagnostics


def _assert_proven(fx: Fixture, fixed: Path, flags: tuple[str, ...]) -> None:
    text = fixed.read_text(encoding="utf-8")
    assert text != fx.path.read_text(encoding="utf-8"), "the fix changed nothing"
    left = _findings(text, fixed)
    assert not left, f"the analyzer still finds: {[(d.line, d.code, d.message[:80]) for d in left]}\n{text}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = load_program(fx.path).reference()
        got = load_program(fixed).run()  # must run clean: torch raising here fails the test
    assert grads_equal(got, expected), f"the fixed program's gradients differ from reference():\n{text}"
    # Fixing again changes nothing.
    _fix(fixed, "--fix", *flags)
    assert fixed.read_text(encoding="utf-8") == text, "a second --fix changed the file again"


@pytest.mark.parametrize("fx", POSITIVES, ids=lambda f: f.id)
def test_fixed_positive_runs_clean_with_reference_gradients(fx: Fixture, tmp_path: Path):
    original = fx.path.read_text(encoding="utf-8")
    safe_copy = _copy(fx, tmp_path, "safe")
    _fix(safe_copy, "--fix")
    after_safe = safe_copy.read_text(encoding="utf-8")

    if fx.id in NO_FIX:
        assert after_safe == original
        unsafe_copy = _copy(fx, tmp_path, "unsafe")
        _fix(unsafe_copy, "--fix", "--unsafe-fixes")
        assert unsafe_copy.read_text(encoding="utf-8") == original
        fixes = [d.fix for d in _findings(original, fx.path) if d.code == fx.path.parent.name]
        if fx.id in KNOWN_MISSES:  # the analyzer does not find it yet, so there is nothing to fix
            assert not fixes
            return
        assert fixes and all(f is None for f in fixes), "listed in NO_FIX but a fix is offered"
        return
    if fx.id in UNSAFE_ONLY:
        assert after_safe == original, "listed in UNSAFE_ONLY but a safe fix changed the file"
        fixes = [d.fix for d in _findings(original, fx.path)]
        assert any(f is not None and not f.safe for f in fixes)
        unsafe_copy = _copy(fx, tmp_path, "unsafe")
        _fix(unsafe_copy, "--fix", "--unsafe-fixes")
        _assert_proven(fx, unsafe_copy, ("--unsafe-fixes",))
        return
    _assert_proven(fx, safe_copy, ())


@pytest.mark.parametrize("fx", NEGATIVES, ids=lambda f: f.id)
def test_fixing_a_negative_changes_nothing(fx: Fixture, tmp_path: Path):
    copy = _copy(fx, tmp_path, "neg")
    _fix(copy, "--fix", "--unsafe-fixes")
    assert copy.read_text(encoding="utf-8") == fx.path.read_text(encoding="utf-8")


def test_the_lists_name_real_positives():
    ids = {fx.id for fx in POSITIVES}
    assert not set(NO_FIX) - ids, set(NO_FIX) - ids
    assert not set(UNSAFE_ONLY) - ids, set(UNSAFE_ONLY) - ids
    assert not set(NO_FIX) & set(UNSAFE_ONLY)


def test_fix_coverage_per_rule(capsys):
    """The counts the issue asks for (printed with -s); every rule with a fix hook fixes most positives."""
    table: dict[str, Counter] = {}
    for fx in POSITIVES:
        kind = "none" if fx.id in NO_FIX else "unsafe" if fx.id in UNSAFE_ONLY else "safe"
        table.setdefault(fx.path.parent.name, Counter())[kind] += 1
    with capsys.disabled():
        print("\nfixes per rule (positives): safe / unsafe only / none")
        for code in sorted(table):
            c = table[code]
            print(f"  {code}: {c['safe']:3d} / {c['unsafe']:3d} / {c['none']:3d}")
    for code, c in table.items():
        if code.startswith("GG00"):  # GG1xx are structural (steps, graph breaks, no_grad views): often no safe edit
            assert c["none"] < sum(c.values()) / 2, f"{code}: most positives have no fix"
