"""What GEMM and convolution kernel names say about their fp32 math (profiling_utils.kernels)."""

from __future__ import annotations

import pytest

from profiling_utils.kernels import TF32_CAPABLE_KERNEL, fp32_math, fp32_math_word

# Names as real traces write them: our H100 recordings (TF32 off and on, measured on the
# device), the A100 and V100 traces of tests/fixtures/foreign and ../shared/foreign-traces.
CUDA_CORES = [
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_"
    "alignc4_execute_kernel__5x_cublas",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>"
    "(cutlass_80_simt_sgemm_256x128_8x4_nt_align1::Params)",
    "ampere_sgemm_128x64_nn",
    "volta_sgemm_64x64_nt",
    "void sgemm_largek_lds64<true, false, 5, 5, 4, 4, 4, 34>(float*, float const*)",
    "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int)",
    "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3_"
    "warpsize1x2x1_g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn",
]
TF32 = [
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x256x32_warpgroupsize2x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>"
    "(cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4::Params)",
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_"
    "warpsize2x2x1_g1_tensor16x8x8_execute_kernel__5x_cudnn",
    "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_128x128_16x4_"
    "nhwc_align4>(cutlass_tensorop_s1688fprop_optimized_tf32_128x128_16x4_nhwc_align4::Params)",
]
SAYS_NOTHING = [
    # 16-bit GEMMs, whose CUTLASS names hold s16816gemm or s1688gemm too.
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
    "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn",
    "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>()",
    "volta_h884gemm_64x64_ldg8_nn",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute",
    # Names that do not say: cuBLAS's nvjet, Triton, AMD's Tensile, a GEMV, PyTorch's own.
    "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNN",
    "triton_tem_fused_mm_0",
    "Cijk_Ailk_Bljk_SB_MT64x64x16_MI32x32x2x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1",
    "void gemmSN_TN_kernel_64addr<float, 128, 16, 2, 4, 8, 9, false>(float)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()",
]


@pytest.mark.parametrize("name", CUDA_CORES)
def test_fp32_on_the_cuda_cores_is_read_from_ffma_or_sgemm(name: str) -> None:
    assert fp32_math(name) == "fp32"


@pytest.mark.parametrize("name", TF32)
def test_tf32_is_read_from_tf32_or_cutlass_s1688(name: str) -> None:
    assert fp32_math(name) == "tf32"


@pytest.mark.parametrize("name", SAYS_NOTHING)
def test_a_name_that_does_not_say_or_names_a_narrow_type_says_nothing(name: str) -> None:
    assert fp32_math(name) is None


def test_kernels_built_for_compute_capability_8_or_newer_are_told_from_older_ones() -> None:
    newer = [*CUDA_CORES[:3], TF32[0], "nvjet_sm90_tst_128x256", "sm100_xmma_gemm_f32f32"]
    assert all(TF32_CAPABLE_KERNEL.search(name) for name in newer)
    older = [
        *("volta_sgemm_64x64_nt", "maxwell_sgemm_128x64_nn", "sm70_xmma_gemm_f16f16"),
        *("void implicit_convolve_sgemm<float, float, 1024>", "turing_fp16_s1688gemm_fp16"),
    ]
    assert not any(TF32_CAPABLE_KERNEL.search(name) for name in older)


def test_the_word_that_decides_is_the_part_of_the_name_read() -> None:
    words = [fp32_math_word(name) for name in (CUDA_CORES[0], CUDA_CORES[2], TF32[0], TF32[1])]
    assert words == ["_ffma_", "sgemm", "tf32", "s1688gemm"]
    assert [fp32_math_word(name) for name in SAYS_NOTHING] == [None] * len(SAYS_NOTHING)
