"""``benchmarks/gpu_aot.py``'s count of the kernels an optimized HLO module launches, on a module
written by hand and counted by hand (the benchmark itself needs JAX's CUDA plugin)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import gpu_aot  # noqa: E402

HLO = """HloModule jit_step, is_scheduled=true

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[8]{0} get-tuple-element(%p), index=1
  %r = f32[8]{0} fusion(%x), kind=kInput, calls=%fused_reduce, backend_config={"operation_queue_id":"0"}
  %g = f32[8]{0} custom-call(%r), custom_call_target="__cublas$gemm"
  ROOT %t = (s32[], f32[8]{0}) tuple(%i, %g)
}

%cond (p: (s32[], f32[8])) -> pred[] {
  %p = (s32[], f32[8]{0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main.1 (a: f32[8,8], b: f32[8,8]) -> f32[8] {
  %a = f32[8,8]{1,0} parameter(0)
  %b = f32[8,8]{1,0} parameter(1)
  %gemm_fusion_dot.2 = f32[8,8]{1,0} fusion(%a, %b), kind=kCustom, calls=%gemm_fusion_dot, backend_config={"operation_queue_id":"0","fusion_backend_config":{"kind":"__triton_nested_gemm_fusion"}}
  %ln = f32[8,8]{1,0} fusion(%gemm_fusion_dot.2), kind=kCustom, calls=%fused_computation, backend_config={"operation_queue_id":"0","fusion_backend_config":{"kind":"__triton"}}
  %e = f32[8]{0} fusion(%ln), kind=kLoop, calls=%fused_add, backend_config={"operation_queue_id":"0"}
  %c = f32[8]{0} copy(%e)
  %bc = f32[8]{0} bitcast(%c)
  %k = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%k, %bc)
  %w = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %out = f32[8]{0} get-tuple-element(%w), index=1
}
"""


def test_kernels_of_a_hand_written_module_by_kind():
    # entry: one product, one Triton row fusion (its operand is named like a product, it is not
    # one), one elementwise fusion, one copy; the loop's body, 3 times: one reduction, one library
    # product. Bytes in and out: the product 256 + 256 + 256, the row fusion 256 + 256, the
    # elementwise one 256 + 32, the copy 32 + 32; the body's two kernels 32 + 32 each, 3 times
    counts = gpu_aot.kernel_counts(HLO)
    counts.pop("flops")  # this module's products are stand-ins (test_flops_of_the_products_by_hand)
    assert counts == {"gemm": 1 + 3, "triton": 1, "reduction": 3, "elementwise": 1, "other": 1,
                      "total": 10, "bytes": 768 + 512 + 288 + 64 + 3 * 128}


def test_a_loop_of_unknown_trip_count_counts_once():
    hlo = HLO.replace(', backend_config={"known_trip_count":{"n":"3"}}', "")
    counts = gpu_aot.kernel_counts(hlo)
    assert counts["total"] == 6 and counts["bytes"] == 768 + 512 + 288 + 64 + 128


PRODUCTS = """HloModule jit_step, is_scheduled=true

%inner (x: f32[4,6], y: f32[6,5]) -> f32[4,5] {
  %x = f32[4,6]{1,0} parameter(0)
  %y = f32[6,5]{1,0} parameter(1)
  ROOT %d = f32[4,5]{1,0} dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%gemm_fusion_dot (a: f32[3,4,6], b: f32[3,6,5], c: f32[4,6], e: f32[6,5]) -> (f32[3,4,5], f32[4,5]) {
  %a = f32[3,4,6]{2,1,0} parameter(0)
  %b = f32[3,6,5]{2,1,0} parameter(1)
  %c = f32[4,6]{1,0} parameter(2)
  %e = f32[6,5]{1,0} parameter(3)
  %bd = f32[3,4,5]{2,1,0} dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %n = f32[4,5]{1,0} fusion(%c, %e), kind=kLoop, calls=%inner
  ROOT %t = (f32[3,4,5]{2,1,0}, f32[4,5]{1,0}) tuple(%bd, %n)
}

%body (p: (s32[], f32[7,2])) -> (s32[], f32[7,2]) {
  %p = (s32[], f32[7,2]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[7,2]{1,0} get-tuple-element(%p), index=1
  %w = f32[2,2]{1,0} constant({...})
  %g = (f32[7,2]{1,0}, s8[64]{0}) custom-call(%x, %w), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  %o = f32[7,2]{1,0} get-tuple-element(%g), index=0
  ROOT %t = (s32[], f32[7,2]{1,0}) tuple(%i, %o)
}

%cond (p: (s32[], f32[7,2])) -> pred[] {
  %p = (s32[], f32[7,2]{1,0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (a: f32[3,4,6], b: f32[3,6,5], c: f32[4,6], e: f32[6,5], x: f32[7,2]) -> f32[7,2] {
  %a = f32[3,4,6]{2,1,0} parameter(0)
  %b = f32[3,6,5]{2,1,0} parameter(1)
  %c = f32[4,6]{1,0} parameter(2)
  %e = f32[6,5]{1,0} parameter(3)
  %x = f32[7,2]{1,0} parameter(4)
  %f = (f32[3,4,5]{2,1,0}, f32[4,5]{1,0}) fusion(%a, %b, %c, %e), kind=kCustom, calls=%gemm_fusion_dot, backend_config={"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion"}}
  %k = s32[] constant(0)
  %init = (s32[], f32[7,2]{1,0}) tuple(%k, %x)
  %w = (s32[], f32[7,2]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
  ROOT %out = f32[7,2]{1,0} get-tuple-element(%w), index=1
}
"""


def test_flops_of_the_products_by_hand():
    # the product fusion: a batched (3 x) 4x6 @ 6x5 product, 2*60*6, and a nested 4x6 @ 6x5 one, 2*20*6;
    # the library product in the loop: 7x2 @ 2x2, 2*14*2, 5 times
    counts = gpu_aot.kernel_counts(PRODUCTS)
    assert counts["gemm"] == 1 + 5 and counts["flops"] == 2 * 60 * 6 + 2 * 20 * 6 + 5 * 2 * 14 * 2
