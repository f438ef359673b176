"""Tests whose oracle is ONNX Runtime itself (its CPU EP's results, its kernels, its opsets) where
releases older than the newest behave otherwise than 1.32, whose behaviour hipep follows.

hipep's references mirror onnxruntime 1.32's CPU kernels (bit for bit where the tests say so);
older releases lack some kernels, load opsets up to 25 (1.24), and compute some ops otherwise.
These cases cannot agree with those releases and stay meaningful with the newest: on a release in
[since, until) they are expected to fail (strict, so one that passes there is reported and this list
stays true); elsewhere they run as usual. Measured with every minor release from 1.24.1 to 1.32.0
(1.24.1, 1.25.0, 1.26.0, 1.27.0, 1.28.0, 1.29.0, 1.30.0, 1.31.1: tools/check_ort_versions.sh and
the same tests on each); the reasons are what the failures show.

Cases are pytest node ids (relative to the repository root) where `*` stands for any text (a
case counter); brackets are literal.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import onnxruntime as ort

ORT_VERSION = tuple(int(p) for p in ort.__version__.split(".")[:2])
FOLLOWED = (1, 32)  # the release whose CPU kernels hipep's references mirror


@dataclass(frozen=True)
class Difference:
    reason: str
    since: tuple[int, int]  # the first release that behaves so (1.24: the oldest supported)
    until: tuple[int, int]  # the first release that agrees with hipep again
    cases: tuple[str, ...]
    # False where the release's result depends on memory it never writes, or on which of its kernels
    # the processor runs: it may then agree (the heap held the right values; the kernel of this
    # processor computes as 1.32), so a pass is not reported
    strict: bool = True
    # True where the release crashes the process on the case (a segfault or an abort): the case is
    # skipped there, since an expected failure cannot outlive its process
    crashes: bool = False


NO_KERNEL = (
    "its CPU EP has no kernel for this op and type (TopK int8/uint8/int16, Trilu int32, Cos f64, "
    "LpNormalization-22, SpaceToDepth int8/bool, Where uint32 in PRelu's expansion, bf16 Mul in "
    "LayerNormalization's): nothing to compare hipep with")

OPSET_26 = (
    "it loads ai.onnx opsets up to 25: the opset-26 cases do not load")

ATTENTION_25 = (
    "its Attention schema is opset 24's (1.30 loads none of the ONNX suite's window cases): the "
    "opset-25 window attributes do not load")

TENSOR_SCATTER = (
    "it has no TensorScatter kernel (ONNX Runtime's CPU kernel came after 1.24; 1.30 has it): "
    "nothing to compare hipep with")

OPSET_28 = (
    "it does not load ai.onnx opsets 27 and 28 (1.30 and 1.31 run none of the ONNX suite's cases at "
    "those opsets): the opset-27 and -28 cases do not load")

INT_REDUCTIONS = (
    "its integer reductions accumulate otherwise (no double accumulator with saturation, "
    "LogSumExp of negative ints, ReduceMin of an empty int axis)")

PAD_GEMM_QUANTIZE = (
    "its Pad in wrap mode, f16 QuantizeLinear, DequantizeLinear-23's output_dtype or f16 Gemm "
    "give other results or refuse")

NORMS = (
    "its normalization kernels (LayerNormalization statistics, SimplifiedLayerNormalization "
    "arithmetic, Skip(Simplified)LayerNormalization's optional outputs) differ from the newest's, "
    "which hipep mirrors bit for bit")

ATTENTION = (
    "its attention kernels differ from the newest's (GroupQueryAttention arithmetic, padding, "
    "sliding-window cache inputs, total-sequence-length check; Attention masks, softcap, qk "
    "output; MatMulNBits), and so do the decoders and accuracy models built on them")

UNWRITTEN_ROWS = (
    "its GroupQueryAttention leaves the output rows past a padded prompt's length unwritten (and reads "
    "a left-padded prompt as right-padded): what they hold (old heap contents, NaN) varies from run "
    "to run")

QUANTIZED_CONTRIB = (
    "its quantized contrib kernels differ from the newest's (GatherBlockQuantized shape inference "
    "and bounds, QMoE activations, routing and block sizes)")

MOE_F16 = (
    "its f16 MoE without normalize_routing_weights weights the selected experts otherwise than its f32 "
    "MoE and 1.32's (which hipep follows)")

QMOE_SCHEMA = (
    "its QMoE schema differs from 1.32's, which tests/unit/test_qmoe_quant_types.py pins: no float8 "
    "scales or weights (a type error at load, not the later kernel's refusal), f16/f32 scales of the "
    "other float type refused, quant_type not yet ignored by its CPU kernel (1.24-1.26); nvfp4's "
    "float8e4m3fn scales refused by type (to 1.28)")

U64_FMOD = (
    "its uint64 Mod with fmod=1 computes through double: a dividend past 2**53 comes out rounded "
    "(1.32 computes in integers, as hipep)")

GRID_SAMPLE_ORDER = (
    "its 2-D linear GridSample with zeros padding and align_corners=0 sums the taps in the generic "
    "order (1.32's fast path, which hipep mirrors bit for bit, multiplies the weights first): the last bit "
    "differs")

MAXPOOL_NAN = (
    "its MaxPool with Indices skips NaN inputs (a window of NaNs and -inf gives -FLT_MAX and index "
    "-1); from 1.29 a NaN wins as a window's first input, as hipep computes")

TRILU_EXTREME_K = (
    "its Trilu mishandles k at int64's extremes: k = 2**63-1 with upper=1 and k = -2**63 with upper=0 "
    "give wrong rows, and k = -2**63 with upper=1 crashes the process (from 1.30 all agree with hipep)")

FUZZ = (
    "the fuzz campaign's oracle is ORT's CPU EP: with these releases it finds their behaviours (a "
    "huge constant ConstantOfShape folded by ORT itself, MatMul and TopK shape checks), none with "
    "1.32")

IRFFT = (
    "its DFT refuses inverse=1 with onesided=1 (the inverse of a one-sided spectrum, numpy's irfft; "
    "1.32 runs it): nothing to compare hipep with")

STFT_COMPLEX = (
    "its STFT of a complex signal gives values unrelated to the signal (up to 1e30; 1.32's are the "
    "transform's)")

REVERSE_EMPTY = (
    "its ReverseSequence leaves a batch entry of length 0 unwritten, where ONNX (and 1.32) copy it "
    "unchanged")

RNN_EMPTY = (
    "its RNN gives a batch entry of sequence length 0 a Y_h other than 0: the initial state in the "
    "reverse direction, values read from before Y's start (memory it never wrote) in the forward one; "
    "1.32 gives 0, as its GRU and LSTM do")

QLINEAR_CONV_ZERO_POINTS = (
    "its QLinearConv refuses per-channel zero points of W that differ (\"zero point of per-channel filter "
    "must be same\"); 1.32 runs them as ONNX defines them, as hipep does")

AFFINE_GRID_F64 = (
    "its f64 AffineGrid computes the base grid in f32 and widens it (1.32 computes it in f64, as hipep "
    "does): grid values differ by up to ~2e-7")

DIFFERENCES = (
    # (measured with 1.24.1 and 1.32.0 only: a pass between is not reported)
    Difference(AFFINE_GRID_F64, since=(1, 24), until=(1, 32), strict=False, cases=(
        'tests/ort/test_affine_grid.py::test_the_cpu_eps_grid_bit_for_bit[*-f64-*]',
        'tests/unit/test_ops_more.py::test_matches_ort[AffineGrid-3d-f64]',
        'tests/gpu/test_gpu_grid_sample.py::test_affine_grid[*-f64-*]',
    )),
    # (measured with 1.24.1 and 1.32.0 only: a pass between is not reported)
    Difference(QLINEAR_CONV_ZERO_POINTS, since=(1, 24), until=(1, 32), strict=False, cases=(
        'tests/unit/test_ops_conv_integer.py::test_per_channel_zero_points_of_w',
        'tests/gpu/test_gpu_conv_integer.py::test_per_channel_zero_points_of_w[*]',
    )),
    Difference(RNN_EMPTY, since=(1, 24), until=(1, 32), strict=False, cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[RNN-22-reverse-relu-clip]',
        'tests/unit/test_ops_recurrent.py::test_matches_the_cpu_ep[rnn-bidirectional-empty-entry]',
        'tests/unit/test_ops_recurrent.py::test_f64_follows_the_f32_computation[RNN]',
        'tests/unit/test_recurrent_on_host.py::test_the_kernel_matches_the_cpu_ep[rnn-bidirectional-empty-entry]',
        'tests/gpu/test_gpu_recurrent.py::test_matches_the_cpu_ep[rnn-bidirectional-empty-entry]',
        'tests/gpu/test_gpu_recurrent.py::test_matches_the_cpu_ep[rnn-wide-batch-first]',
    )),
    Difference(IRFFT, since=(1, 24), until=(1, 32), strict=False, cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[DFT-20-irfft]',
    )),
    Difference(STFT_COMPLEX, since=(1, 24), until=(1, 32), strict=False, cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[STFT-17-complex]',
    )),
    Difference(REVERSE_EMPTY, since=(1, 24), until=(1, 32), strict=False, cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[ReverseSequence-10-empty-entry]',
        'tests/ort/test_reverse_sequence.py::test_reverse_sequence_gives_the_cpu_eps_values[*]',
    )),
    Difference(GRID_SAMPLE_ORDER, since=(1, 24), until=(1, 32), strict=False, cases=(
        'tests/unit/test_ops_grid_sample.py::test_session_default_attributes_per_opset',
    )),
    # (the release that stopped rounding is not pinned down: a pass between is not reported)
    Difference(U64_FMOD, since=(1, 24), until=(1, 32), strict=False, cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[Mod-uint64-fmod]',
    )),
    Difference(NO_KERNEL, since=(1, 24), until=(1, 25), cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[LpNormalization-22-*]',
        'tests/unit/test_ops_more.py::test_matches_ort[LpNormalization-f16]',
        'tests/unit/test_ops_more.py::test_matches_ort[LpNormalization-p1-zero-row]',
        'tests/unit/test_ops_more.py::test_matches_ort[LpNormalization-zero-row]',
    )),
    Difference(NO_KERNEL, since=(1, 24), until=(1, 26), cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[TopK-int16-small]',
        'tests/unit/test_ops_more.py::test_matches_ort[TopK-int16]',
        'tests/unit/test_ops_more.py::test_matches_ort[TopK-int8-small]',
        'tests/unit/test_ops_more.py::test_matches_ort[TopK-int8]',
        'tests/unit/test_ops_more.py::test_matches_ort[TopK-uint8-small]',
        'tests/unit/test_ops_more.py::test_matches_ort[TopK-uint8]',
    )),
    Difference(NO_KERNEL, since=(1, 24), until=(1, 28), cases=(
        'tests/unit/test_ops_vision_resize_blocks.py::test_matches_ort[SpaceToDepth-bool]',
        'tests/unit/test_ops_vision_resize_blocks.py::test_matches_ort[SpaceToDepth-i8]',
    )),
    Difference(NO_KERNEL, since=(1, 24), until=(1, 29), cases=(
        'tests/unit/test_ops_reference.py::test_matches_ort[Cos-7-f64]',
        'tests/unit/test_ops_reference.py::test_matches_ort[Cos-22-f64]',
        'tests/unit/test_ops_reference.py::test_matches_ort[Cos-f64-scalar]',
        'tests/unit/test_ops_more.py::test_matches_ort[Trilu-int32]',
    )),
    Difference(MAXPOOL_NAN, since=(1, 24), until=(1, 29), cases=(
        'tests/unit/test_ops_vision_conv_pool.py::test_matches_ort[MaxPool-indices-nan]',
    )),
    Difference(TRILU_EXTREME_K, since=(1, 24), until=(1, 30), cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[Trilu-k9223372036854775807-upper1]',
        'tests/unit/test_ops_more.py::test_matches_ort[Trilu-k-9223372036854775808-upper0]',
    )),
    Difference(TRILU_EXTREME_K, since=(1, 24), until=(1, 30), crashes=True, cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[Trilu-k-9223372036854775808-upper1]',
    )),
    Difference(NO_KERNEL, since=(1, 24), until=(1, 30), cases=(
        'tests/ort/test_bf16.py::test_bf16_graph_runs_whole_and_bit_identical',
    )),
    Difference(NO_KERNEL, since=(1, 24), until=(1, 31), cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[PRelu-u32]',
    )),
    Difference(OPSET_26, since=(1, 24), until=(1, 25), cases=(
        'tests/unit/test_ops_contrib.py::test_matches_ort[SLN-opset26]',
        'tests/unit/test_ops_more.py::test_matches_ort[BitCast-*]',
        'tests/unit/test_ops_more.py::test_matches_ort[CumProd-26-*]',
        'tests/unit/test_ops_more.py::test_matches_ort[CumProd-26-i32]',
        'tests/unit/test_ops_more.py::test_matches_ort[CumProd-26-i64]',
        'tests/unit/test_ops_more.py::test_matches_ort[CumProd-empty]',
        'tests/unit/test_ops_more.py::test_matches_ort[CumProd-f16]',
        'tests/unit/test_ops_more.py::test_matches_ort[CumProd-f64]',
        'tests/unit/test_ops_more.py::test_matches_ort[CumProd-u32]',
        'tests/unit/test_ops_more.py::test_matches_ort[CumProd-u64]',
    )),
    Difference(TENSOR_SCATTER, since=(1, 24), until=(1, 25), cases=(
        'tests/unit/test_ops_tensor_scatter_attention.py::test_present_bound_to_past_buffer_is_updated_in_place',
        'tests/unit/test_ops_tensor_scatter_attention.py::test_tensor_scatter_session_matches_cpu_ep[*]',
        'tests/unit/test_ops_tensor_scatter_attention.py::'
        'test_tensor_scatter_write_index_out_of_range_raises_and_the_session_runs_on[*]',
        'tests/unit/test_ops_vision_indexing.py::test_matches_ort[TensorScatter-*]',
    )),
    Difference(ATTENTION_25, since=(1, 24), until=(1, 32), cases=(
        'tests/unit/test_ops_attention.py::test_attention[25-*]',
        'tests/unit/test_ops_tensor_scatter_attention.py::test_attention_25_mask_with_more_keys_than_the_cache_raises',
        'tests/unit/test_ops_tensor_scatter_attention.py::test_attention_25_session_matches_cpu_ep[*]',
        'tests/unit/test_ops_tensor_scatter_attention.py::test_decoder_steps_on_an_external_cache[*]',
    )),
    Difference(OPSET_28, since=(1, 24), until=(1, 32), cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[BitShift-28-*]',
        'tests/unit/test_ops_more.py::test_matches_ort[Celu-scalar]',
        'tests/unit/test_ops_more.py::test_matches_ort[Celu-28-*]',
        'tests/unit/test_ops_more.py::test_matches_ort[Compress-28*]',
        'tests/unit/test_ops_more.py::test_matches_ort[Einsum-28]',
        'tests/unit/test_ops_more.py::test_matches_ort[Range-27-*]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceLogSum-28*]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceLogSumExp-28*]',
        'tests/unit/test_ops_vision_indexing.py::test_matches_ort[OneHot-28-*]',
        'tests/unit/test_ops_vision_resize_blocks.py::test_matches_ort[DepthToSpace-28-*]',
        'tests/unit/test_ops_vision_resize_blocks.py::test_matches_ort[SpaceToDepth-28-*]',
    )),
    Difference(INT_REDUCTIONS, since=(1, 24), until=(1, 27), cases=(
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceL1-int32-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceL1-int64-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceL2-int32-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceL2-int64-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceLogSum-int32-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceLogSum-int64-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceLogSumExp-int-negative]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceMean-int32-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceMean-int64-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceProd-int32-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceProd-int64-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceSum-int32-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceSum-int64-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceSumSquare-int32-double-saturate]',
        'tests/unit/test_ops_more.py::test_matches_ort[ReduceSumSquare-int64-double-saturate]',
        'tests/unit/test_ops_reference.py::test_matches_ort[ReduceMin-int-empty]',
    )),
    Difference(PAD_GEMM_QUANTIZE, since=(1, 24), until=(1, 30), cases=(
        'tests/unit/test_ops_vision_quantize.py::test_matches_ort[QuantizeLinear-19-f16]',
        'tests/unit/test_ops_vision_quantize.py::test_matches_ort[QuantizeLinear-21-f16]',
        'tests/unit/test_ops_vision_quantize.py::test_matches_ort[QuantizeLinear-23-f16]',
        'tests/unit/test_ops_vision_quantize.py::test_matches_ort[QuantizeLinear-25-f16]',
    )),
    Difference(PAD_GEMM_QUANTIZE, since=(1, 24), until=(1, 31), cases=(
        'tests/unit/test_ops_vision_movement.py::test_matches_ort[Pad-19-wrap]',
        'tests/unit/test_ops_vision_movement.py::test_matches_ort[Pad-21-wrap]',
        'tests/unit/test_ops_vision_movement.py::test_matches_ort[Pad-23-wrap]',
        'tests/unit/test_ops_vision_movement.py::test_matches_ort[Pad-24-wrap]',
        'tests/unit/test_ops_vision_movement.py::test_matches_ort[Pad-25-wrap]',
        'tests/unit/test_ops_vision_quantize.py::test_matches_ort[DequantizeLinear-23-output-dtype-f16]',
        'tests/unit/test_ops_vision_quantize.py::test_matches_ort[DequantizeLinear-23-output-dtype-f32]',
    )),
    Difference(PAD_GEMM_QUANTIZE, since=(1, 29), until=(1, 30), cases=(
        'tests/unit/test_ops_reference.py::test_matches_ort[Gemm-f16]',
    )),
    Difference(NORMS, since=(1, 24), until=(1, 27), cases=(
        'tests/unit/test_bit_exact.py::test_layer_norm[shape0--1-bias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape0--1-nobias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape1--1-bias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape1--1-nobias]',
    )),
    Difference(NORMS, since=(1, 24), until=(1, 30), cases=(
        'tests/unit/test_bit_exact.py::test_layer_norm[shape2--1-bias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape2--1-nobias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape3--1-bias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape3--1-nobias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape4--1-bias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape4--1-nobias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape5--1-bias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape5--1-nobias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape6-1-bias]',
        'tests/unit/test_bit_exact.py::test_layer_norm[shape6-1-nobias]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SSLN-float16-300]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SSLN-float16-64]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SSLN-float16-7]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SSLN-float32-300]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SSLN-float32-64]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SSLN-float32-7]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SkipLN-2d-bias-no-beta]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SkipLN-float16-300]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SkipLN-float16-64]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SkipLN-float16-7]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SkipLN-float16-skip-1SH-no-beta]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SkipLN-float32-300]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SkipLN-float32-64]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SkipLN-float32-7]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[SkipLN-float32-skip-1SH-no-beta]',
        'tests/unit/test_ops_contrib.py::test_norms_are_bit_exact_on_x86[16]',
        'tests/unit/test_ops_contrib.py::test_norms_are_bit_exact_on_x86[256]',
        'tests/unit/test_ops_contrib.py::test_norms_are_bit_exact_on_x86[37]',
        'tests/unit/test_ops_contrib.py::test_norms_are_bit_exact_on_x86[9]',
        'tests/unit/test_ops_reference.py::test_matches_ort[LayerNormalization-f16]',
    )),
    Difference(ATTENTION, since=(1, 24), until=(1, 25), cases=(
        'tests/unit/test_accuracy_harness.py::test_synthetic_models_pass',
        'tests/unit/test_ops_attention.py::test_attention[24-nonpad]',
        'tests/unit/test_ops_attention.py::test_attention[bool-mask-heads]',
        'tests/unit/test_ops_attention.py::test_attention[f16-float-mask-causal]',
    )),
    Difference(ATTENTION, since=(1, 24), until=(1, 27), cases=(
        'tests/unit/test_ops_attention.py::test_attention[qk-raw]',
        'tests/unit/test_ops_attention.py::test_attention[qk-softcap]',
        'tests/unit/test_ops_attention.py::test_attention[softcap-mask-causal]',
    )),
    Difference(ATTENTION, since=(1, 24), until=(1, 28), cases=(
        'tests/unit/test_bit_exact.py::test_group_query_attention[flash-33]',
        'tests/unit/test_bit_exact.py::test_group_query_attention[flash-bias]',
        'tests/unit/test_bit_exact.py::test_group_query_attention[flash-chunk]',
        'tests/unit/test_bit_exact.py::test_group_query_attention[flash-decode]',
        'tests/unit/test_bit_exact.py::test_group_query_attention[flash-long]',
        'tests/unit/test_bit_exact.py::test_group_query_attention[flash-partial-rotary]',
        'tests/unit/test_bit_exact.py::test_group_query_attention[flash-prompt]',
        'tests/unit/test_bit_exact.py::test_group_query_attention[flash-ragged-decode]',
        'tests/unit/test_bit_exact.py::test_group_query_attention[flash-ragged]',
        'tests/unit/test_bit_exact.py::test_group_query_attention[flash-window]',
        'tests/unit/test_bit_exact.py::test_group_query_attention[softcap-ragged-bias]',
        'tests/unit/test_ops_attention.py::test_attention[24-nonpad-causal]',
        'tests/unit/test_ops_attention.py::test_attention[24-nonpad-empty]',
        'tests/unit/test_ops_attention.py::test_attention[dead-row]',
        'tests/unit/test_ops_attention.py::test_gqa_total_sequence_length_must_fit_the_cache',
        'tests/unit/test_ops_attention.py::test_group_query_attention[local-window-padded-prompt]',
        'tests/unit/test_ops_attention.py::test_group_query_attention[prompt-b2-right-padded-rotary]',
        'tests/unit/test_ops_attention.py::test_group_query_attention[shared-prompt]',
        'tests/unit/test_ops_attention_layer.py::test_decoder_layer_fixed_capacity_cache_through_hipep',
        'tests/unit/test_ops_attention_layer.py::test_decoder_layer_through_hipep[False-float32-schedule1]',
        'tests/unit/test_ops_attention_layer.py::test_decoder_layer_through_hipep[True-float16-schedule2]',
        'tests/unit/test_ops_attention_layer.py::test_decoder_layer_through_hipep[True-float32-schedule0]',
    )),
    Difference(UNWRITTEN_ROWS, since=(1, 24), until=(1, 28), strict=False, cases=(
        'tests/unit/test_ops_attention.py::test_group_query_attention[f16-padded-prompt-rotary]',
        'tests/unit/test_ops_attention.py::test_group_query_attention[local-window-padded-prompt-softcap]',
        'tests/unit/test_ops_attention.py::test_group_query_attention[prompt-b2-left-padded]',
    )),
    Difference(ATTENTION, since=(1, 24), until=(1, 29), cases=(
        'tests/unit/test_ops_attention.py::test_gqa_sliding_window_cache[float16-4-5-2-extra3]',
        'tests/unit/test_ops_attention.py::test_gqa_sliding_window_cache[float32-2-6-4-extra4]',
        'tests/unit/test_ops_attention.py::test_gqa_sliding_window_cache[float32-3-3-5-extra2]',
        'tests/unit/test_ops_attention.py::test_gqa_sliding_window_cache[float32-4-6-3-extra0]',
        'tests/unit/test_ops_attention.py::test_gqa_sliding_window_cache[float32-4-6-9-extra1]',
        'tests/unit/test_ops_attention.py::test_gqa_sliding_window_cache_ragged_batch',
        'tests/unit/test_ops_attention_layer.py::test_decoder_layer_sliding_window_cache_through_hipep',
    )),
    Difference(ATTENTION, since=(1, 24), until=(1, 30), cases=(
        'tests/unit/test_bit_exact.py::test_int4_block_end_to_end',
        'tests/unit/test_bit_exact.py::test_int4_decoder_every_node_output[gemma2]',
        'tests/unit/test_bit_exact.py::test_int4_decoder_every_node_output[llama]',
        'tests/unit/test_bit_exact.py::test_int4_decoder_every_node_output[phi]',
    )),
    Difference(QUANTIZED_CONTRIB, since=(1, 24), until=(1, 25), cases=(
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs0-gelu-float16-zp-scales_float32]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs0-relu-float32-rw-normalize_routing_weights0]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs0-silu-float32-rw]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs0-silu-float32]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs32-silu-float16]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs32-silu-float32-scales_float16]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b8-bs0-gelu-float32-zp]',
    )),
    # On x86 processors without AVX512-VNNI, 1.24's QMoE gives these 4-bit SwiGLU cases 1.32's results;
    # on processors with it, it does not.
    Difference(QUANTIZED_CONTRIB, since=(1, 24), until=(1, 25), strict=False, cases=(
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs0-swiglu-float32-swiglu_limit0.3-activation_alpha1.702-activation_beta1.0]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs32-swiglu-float16-k4-E8-swiglu_limit7.0-activation_alpha1.702-activation_beta1.0]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs32-swiglu-float32-k1-E8-swiglu_limit7.0-activation_alpha1.702-activation_beta1.0]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs32-swiglu-float32-k4-E8-swiglu_limit7.0-activation_alpha1.702-activation_beta1.0]',
    )),
    Difference(QUANTIZED_CONTRIB, since=(1, 24), until=(1, 27), cases=(
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b2-h40-float16]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b2-h40-float32]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b2-h64-float16]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b2-h64-float32]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b2-h96-float16]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b2-h96-float32]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b4-h40-float16]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b4-h40-float32]',
    )),
    Difference(QUANTIZED_CONTRIB, since=(1, 24), until=(1, 31), cases=(
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b2-h40-oob-nozp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b2-h64-oob-nozp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b2-h96-oob-nozp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b4-h40-oob-nozp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b4-h64-oob-nozp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b4-h96-oob-nozp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b8-h40-oob-nozp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b8-h64-oob-nozp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[GBQ-b8-h96-oob-nozp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs32-swiglu-float32-accuracy_level4]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b4-bs32-swiglu-float32-zp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b8-bs16-identity-float32-zp]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b8-bs32-relu-float32-normalize_routing_weights0]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b8-bs32-relu-float32-scales_float16]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b8-bs32-swiglu-float16]',
        'tests/unit/test_ops_contrib.py::test_matches_ort[QMoE-b8-bs32-swiglu-float32-k4-E8-swiglu_limit7.0-activation_alpha1.702-activation_beta1.0]',
        'tests/unit/test_ops_contrib.py::test_qmoe_end_to_end',
    )),
    Difference(QMOE_SCHEMA, since=(1, 24), until=(1, 27), cases=(
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_ignores_quant_type[float16-fp4]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_ignores_quant_type[float16-fp8]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_ignores_quant_type[float16-no-such-type]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_ignores_quant_type[float16-nvfp4]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_ignores_quant_type[float16-wfp4afp8]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_ignores_quant_type[float32-fp4]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_ignores_quant_type[float32-fp8]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_ignores_quant_type[float32-no-such-type]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_ignores_quant_type[float32-nvfp4]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_ignores_quant_type[float32-wfp4afp8]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_runs_no_schema_form[fp4]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_runs_no_schema_form[fp8]',
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_runs_no_schema_form[wfp4afp8]',
        'tests/unit/test_qmoe_quant_types.py::test_scales_of_the_other_float_type_stay_off_the_gpu[float16-float32]',
        'tests/unit/test_qmoe_quant_types.py::test_scales_of_the_other_float_type_stay_off_the_gpu[float32-float16]',
    )),
    Difference(QMOE_SCHEMA, since=(1, 24), until=(1, 29), cases=(
        'tests/unit/test_qmoe_quant_types.py::test_cpu_ep_runs_no_schema_form[nvfp4]',
    )),
    Difference(MOE_F16, since=(1, 24), until=(1, 32), cases=(
        'tests/unit/test_ops_contrib.py::test_matches_ort[MoE-silu-float16-k2-normalize_routing_weights0]',
    )),
    Difference(FUZZ, since=(1, 24), until=(1, 32), cases=(
        'tests/ort/test_fuzz.py::test_bounded_profile',
    )),
)


def difference(nodeid: str, version: tuple[int, int] = ORT_VERSION) -> Difference | None:
    """The difference `nodeid` shows with onnxruntime `version`, if it is one of the cases above there."""
    for diff in DIFFERENCES:
        if diff.since <= version < diff.until and any(
                fnmatch.fnmatchcase(nodeid, case.replace("[", "[[]")) for case in diff.cases):
            return diff
    return None


def expected_failure(nodeid: str, version: tuple[int, int] = ORT_VERSION) -> tuple[str, bool] | None:
    """Why `nodeid` fails with onnxruntime `version`, if it is one of the cases above there, and
    whether a pass there is reported (strict)."""
    diff = difference(nodeid, version)
    return None if diff is None else (f"onnxruntime {version[0]}.{version[1]}: {diff.reason}", diff.strict)
