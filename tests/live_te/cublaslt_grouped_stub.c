/* Test harness only, for TE 2.14.1 on a CUDA 13.0 machine. TE 2.14.1's core library
 * (transformer-engine-cu13) links cublasLtGroupedMatrixLayoutInit_internal, which cuBLAS adds after
 * CUDA 13.0 and which only its cuBLAS grouped GEMM (nvte_grouped_gemm, cublaslt_grouped_gemm.cu)
 * calls; CUDA 13.0's and PyTorch 2.11's libcublasLt do not define it, so the library does not load.
 * This definition, preloaded, lets it load: the call answers CUBLAS_STATUS_NOT_SUPPORTED (15), which
 * TE turns into an error, so nothing that needs the grouped GEMM runs unnoticed. device_setup.sh
 * builds and preloads it only where TE's import fails on that symbol. */
int cublasLtGroupedMatrixLayoutInit_internal(void) { return 15; }
