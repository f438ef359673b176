"""Tests whose oracle is ONNX Runtime itself (its CPU EP's results, its kernels, its opsets) where
onnxruntime 1.24 behaves otherwise than the newest release, whose behaviour hipep follows.

hipep's references mirror the newest onnxruntime's CPU kernels (bit for bit where the tests say
so); 1.24's kernels lack some types, load opsets up to 25 only, and compute some contrib ops
otherwise. These cases cannot agree with 1.24 and stay meaningful with 1.25 and newer: on 1.24
they are expected to fail (strict: one that passes there is reported, so this list stays true);
elsewhere they run as usual. Observed with onnxruntime 1.24.1 against 1.32.0, on which all pass.

Patterns are pytest node ids (relative to the repository root) where `*` stands for any text;
brackets are literal.
"""
from __future__ import annotations

import fnmatch

import onnxruntime as ort

OLDER_THAN = (1, 25)

MORE = "tests/unit/test_ops_more.py::test_matches_ort"
CONTRIB = "tests/unit/test_ops_contrib.py"
VISION = "tests/unit/test_ops_vision.py::test_matches_ort"
ATTENTION = "tests/unit/test_ops_attention.py"
BIT_EXACT = "tests/unit/test_bit_exact.py"

DIFFERENCES: dict[str, tuple[str, ...]] = {
    "onnxruntime 1.24's CPU EP has no kernel for this op and type (TopK int8/uint8/int16, Trilu int32, "
    "LpNormalization-22, SpaceToDepth int8/bool, Where uint32 in PRelu's expansion, bf16 Mul in "
    "LayerNormalization's): nothing to compare hipep with": (
        f"{MORE}[TopK-int8*]", f"{MORE}[TopK-uint8*]", f"{MORE}[TopK-int16*]", f"{MORE}[Trilu-int32]",
        f"{MORE}[LpNormalization-22-*]", f"{MORE}[LpNormalization-zero-row]", f"{MORE}[LpNormalization-p1-zero-row]",
        f"{MORE}[LpNormalization-f16]", f"{MORE}[PRelu-u32]", f"{VISION}[SpaceToDepth-i8]",
        f"{VISION}[SpaceToDepth-bool]", "tests/ort/test_bf16.py::test_bf16_graph_runs_whole_and_bit_identical",
    ),
    "onnxruntime 1.24 loads ai.onnx opsets up to 25: the opset-26 cases do not load in its CPU EP": (
        f"{MORE}[CumProd-*]", f"{CONTRIB}::test_matches_ort[SLN-opset26]",
    ),
    "onnxruntime 1.24's integer reductions accumulate otherwise (no double accumulator with saturation, "
    "LogSumExp of negative ints, ReduceMin of an empty int axis)": (
        f"{MORE}[Reduce*-int*-double-saturate]", f"{MORE}[ReduceLogSumExp-int-negative]",
        "tests/unit/test_ops_reference.py::test_matches_ort[ReduceMin-int-empty]",
    ),
    "onnxruntime 1.24's Pad in wrap mode and f16 QuantizeLinear/DequantizeLinear-23 output_dtype give "
    "other results or refuse": (
        f"{VISION}[Pad-*-wrap]", f"{VISION}[QuantizeLinear-*-f16]", f"{VISION}[DequantizeLinear-23-output-dtype-*]",
    ),
    "onnxruntime 1.24's normalization kernels (LayerNormalization f16 statistics, SimplifiedLayerNormalization "
    "arithmetic, Skip(Simplified)LayerNormalization without the optional outputs) differ from the newest's, "
    "which hipep mirrors bit for bit": (
        "tests/unit/test_ops_reference.py::test_matches_ort[LayerNormalization-f16]",
        f"{BIT_EXACT}::test_layer_norm[*]", f"{CONTRIB}::test_norms_are_bit_exact_on_x86[*]",
        *(f"{CONTRIB}::test_matches_ort[SSLN-float{bits}-{n}]" for bits in (16, 32) for n in (7, 64, 300)),
        f"{CONTRIB}::test_matches_ort[SkipLN-*]",
    ),
    "onnxruntime 1.24's attention kernels differ from the newest's (GroupQueryAttention: arithmetic, padding, "
    "no sliding-window cache inputs in its schema, no total-sequence-length check; Attention: masks, softcap, "
    "qk output), and so do the decoders and the accuracy models built on them": (
        f"{BIT_EXACT}::test_group_query_attention[flash-*]",
        f"{BIT_EXACT}::test_group_query_attention[softcap-ragged-bias]", f"{BIT_EXACT}::test_int4_decoder_every_node_output[*]",
        f"{BIT_EXACT}::test_int4_block_end_to_end",
        f"{ATTENTION}::test_group_query_attention[prompt-b2-left-padded]",
        f"{ATTENTION}::test_group_query_attention[prompt-b2-right-padded-rotary]",
        f"{ATTENTION}::test_group_query_attention[shared-prompt]",
        f"{ATTENTION}::test_group_query_attention[local-window-padded-prompt*]",
        f"{ATTENTION}::test_group_query_attention[f16-padded-prompt-rotary]",
        f"{ATTENTION}::test_attention[bool-mask-heads]", f"{ATTENTION}::test_attention[f16-float-mask-causal]",
        f"{ATTENTION}::test_attention[dead-row]", f"{ATTENTION}::test_attention[softcap-mask-causal]",
        f"{ATTENTION}::test_attention[qk-raw]",
        f"{ATTENTION}::test_attention[qk-softcap]", f"{ATTENTION}::test_attention[24-nonpad*]",
        f"{ATTENTION}::test_gqa_sliding_window_cache*", f"{ATTENTION}::test_gqa_total_sequence_length_must_fit_the_cache",
        f"{ATTENTION}::test_decoder_layer_*",
        "tests/unit/test_accuracy_harness.py::test_synthetic_models_pass",
    ),
    "onnxruntime 1.24's quantized contrib kernels differ from the newest's (GatherBlockQuantized shape "
    "inference and bounds, QMoE activations, routing and block sizes)": (
        f"{CONTRIB}::test_matches_ort[GBQ-b2-*]", f"{CONTRIB}::test_matches_ort[GBQ-b4-h40-*]",
        f"{CONTRIB}::test_matches_ort[GBQ-*-oob-nozp]", f"{CONTRIB}::test_matches_ort[QMoE-*]",
        f"{CONTRIB}::test_qmoe_end_to_end",
    ),
    "the fuzz campaign's oracle is ORT's CPU EP: with onnxruntime 1.24 it finds 1.24's behaviours (a huge "
    "constant ConstantOfShape folded by ORT itself, MatMul and TopK shape checks), none with the newest": (
        "tests/ort/test_fuzz.py::test_bounded_profile",
    ),
}


def expected_failure(nodeid: str) -> str | None:
    """Why `nodeid` fails with the installed onnxruntime, if it is one of the cases above and
    that onnxruntime is older than OLDER_THAN; else None."""
    if tuple(int(p) for p in ort.__version__.split(".")[:2]) >= OLDER_THAN:
        return None
    for reason, patterns in DIFFERENCES.items():
        if any(fnmatch.fnmatchcase(nodeid, p.replace("[", "[[]")) for p in patterns):
            return reason
    return None
