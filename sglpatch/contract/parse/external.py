"""External base classes the checker knows by their real members (issue 16).

A model class whose base is outside the tree (``transformers.PreTrainedModel``) used to make every
member it lacks ``unknown``. transformers' model base is listed here instead, as torch.nn.Module
is below: its API, not SGLang's contract. Generated from the transformers each line's
runtime installs (4.57.1 for SGLang 0.5.9, 5.19.0 for 0.5.23): the union of the class's own
attributes (``dir(PreTrainedModel)`` less torch.nn.Module's) and the ``self.X`` its ``__init__``
methods set. tests/test_contract.py compares the list with the installed transformers.
"""

from __future__ import annotations

PRETRAINED_MODEL_BASES = frozenset(("transformers.PreTrainedModel", "transformers.modeling_utils.PreTrainedModel"))

PRETRAINED_MODEL_MEMBERS = frozenset(
    """
_adjust_bias _adjust_missing_and_unexpected_keys _auto_class
_backward_compatibility_gradient_checkpointing _can_compile_fullgraph _can_record_outputs
_can_set_attn_implementation _can_set_experts_implementation _check_and_adjust_attn_implementation
_check_and_adjust_experts_implementation _checkpoint_conversion_mapping
_compatible_flash_implementations _convert_head_mask_to_5d _copy_lm_head_original_to_resized
_create_repo _default_compile_config _device_mesh _dispatch_accelerate_model _ep_plan
_finalize_model_loading _fix_state_dict_key_on_load _fix_state_dict_key_on_save
_fix_state_dict_keys_on_save _flash_attn_2_can_dispatch _flash_attn_3_can_dispatch
_flash_attn_can_dispatch _flash_attn_import_error _flex_attn_can_dispatch _from_config _fsdp_plan
_fsdp_size _get_dtype_plan _get_files_timestamps _get_key_renaming_mapping _get_no_split_modules
_get_resized_embeddings _get_resized_lm_head _grouped_mm_can_dispatch _hf_peft_config_loaded
_hook_rss_memory_post_forward _hook_rss_memory_pre_forward _init_added_embeddings_weights_with_mean
_init_added_lm_head_bias_with_mean _init_added_lm_head_weights_with_mean _init_weights
_initialize_missing_keys _initialize_weights _input_embed_layer
_is_distributed_loading_by_transformers _is_stateful _keep_in_fp32_modules
_keep_in_fp32_modules_strict _keys_to_ignore_on_load_missing _keys_to_ignore_on_load_unexpected
_keys_to_ignore_on_save _load_from_flax _load_from_tf _load_pretrained_model _mesh_manager
_move_missing_keys_from_meta_to_cpu _move_missing_keys_from_meta_to_device _no_split_modules
_pp_plan _prepare_peft_hotswap_kwargs _resize_token_embeddings _sdpa_can_dispatch _set_default_dtype
_set_gradient_checkpointing _skip_keys_device_placement _supports_attention_backend
_supports_context_parallel _supports_flash_attn _supports_flex_attn _supports_sdpa
_tie_encoder_decoder_weights _tie_or_clone_weights _tied_weights_keys _tp_plan _tp_size
_upload_modified_files active_adapters add_adapter add_memory_hooks add_model_tags
barrier_after_gathered_checkpoint_save base_model base_model_prefix can_generate can_record_outputs
config config_class create_extended_attention_mask_for_decoder delete_adapter dequantize device
disable_adapters disable_input_require_grads dtype dummy_inputs enable_adapters enable_peft_hotswap
ep_plan estimate_tokens floating_point_ops framework from_pretrained fsdp_plan fsdp_size
gather_sharded_state_dict_for_save generation_config generation_config_class get_adapter_state_dict
get_compiled_call get_correct_attn_implementation get_correct_experts_implementation get_decoder
get_encoder get_expanded_tied_weights_keys get_experts_implementation get_extended_attention_mask
get_head_mask get_init_context get_memory_footprint get_parameter_or_buffer
gradient_checkpointing_disable gradient_checkpointing_enable init_parallel_plans init_weights
initialize_weights input_modalities invert_attention_mask is_backend_compatible is_custom_code
is_distributed_loading_by_transformers is_gradient_checkpointing is_parallelizable is_remote_code
kernel_config kernelize load_adapter loss_function loss_type main_input_name
mark_tied_weights_as_initialized maybe_distribute_model model_tags name_or_path
named_non_persistent_buffers num_parameters post_init pp_plan prepare_distribute_model prune_heads
push_to_hub register_for_auto_class reset_memory_hooks_state resize_token_embeddings
retrieve_modules_from_names reverse_bettertransformer save_distributed_checkpoint save_pretrained
set_adapter set_attn_implementation set_decoder set_encoder set_experts_implementation
set_output_embeddings set_use_kernels should_save_on_this_rank supports_context_parallel
supports_gradient_checkpointing supports_pp_plan supports_tp_plan tie_embeddings_and_encoder_decoder
tie_weights to_bettertransformer tp_plan tp_size use_kernels warn_if_padding_and_no_attention_mask
warnings_issued
""".split()
)

# PreTrainedModel's defaults that raise NotImplementedError unless the subclass points
# base_model_prefix at an inner model that has them: not members a wrapper gets for free.
PRETRAINED_DEFAULT_RAISES = frozenset(
    """
enable_input_require_grads get_input_embeddings get_output_embeddings get_position_embeddings
resize_position_embeddings set_input_embeddings
""".split()
)


# torch.nn.Module's public (and commonly used private) attributes: the one external base every
# model class has. This is torch's API, not SGLang's contract, so it is listed rather than derived.
NN_MODULE_MEMBERS = frozenset(
    """
__call__ __init__ __getattr__ __setattr__ __delattr__ __dir__ __repr__ __getstate__ __setstate__
forward training dump_patches call_super_init T_destination
register_buffer register_parameter add_module register_module get_submodule set_submodule
get_parameter get_buffer get_extra_state set_extra_state apply cuda ipu xpu mtia cpu type float
double half bfloat16 to_empty to register_full_backward_pre_hook register_backward_hook
register_full_backward_hook register_forward_pre_hook register_forward_hook
register_state_dict_post_hook register_state_dict_pre_hook register_load_state_dict_pre_hook
register_load_state_dict_post_hook state_dict load_state_dict parameters named_parameters buffers
named_buffers children named_children modules named_modules train eval requires_grad_ zero_grad
share_memory extra_repr compile
_apply _call_impl _wrapped_call_impl _get_name _named_members _load_from_state_dict
_save_to_state_dict _parameters _buffers _modules _non_persistent_buffers_set _forward_hooks
_forward_pre_hooks _backward_hooks _backward_pre_hooks _state_dict_hooks _load_state_dict_pre_hooks
_version _is_full_backward_hook _compiled_call_impl
""".split()
)
NN_MODULE_BASES = frozenset(("torch.nn.Module", "torch.nn.modules.module.Module"))
# Bases that contribute nothing the runtime looks up.
EMPTY_BASES = frozenset(
    (
        "builtins.object",
        "object",
        "abc.ABC",
        "typing.Generic",
        "typing.Protocol",
        "typing_extensions.Protocol",
        "abc.ABCMeta",
        "enum.Enum",
    )
)
# Bases that add no attributes of their own beyond object's (for ClassIndex.resolves).
CLOSED_BASES = frozenset(
    ("builtins.object", "object", "abc.ABC", "typing.Generic", "typing.Protocol", "typing_extensions.Protocol")
)
PLAIN_CLASS_DECORATORS = frozenset(("dataclass", "total_ordering", "final", "runtime_checkable", "unique"))
OBJECT_MEMBERS = frozenset(dir(object)) | {
    "__dict__",
    "__class__",
    "__module__",
    "__annotations__",
    "__wrapped__",
    "__name__",
    "__qualname__",
    "__mro__",
}
