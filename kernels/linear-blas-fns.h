/* linear-blas-fns.h - the cuBLASLt entry points linear-blas.cu takes from libcublasLt.so.13
 * with dlsym, as LT_FN(return type, name, parameters); included with LT_FN defined. */
LT_FN(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t *))
LT_FN(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t))
LT_FN(cublasStatus_t, cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t))
LT_FN(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t))
LT_FN(cublasStatus_t, cublasLtMatmulDescSetAttribute,
      (cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t))
LT_FN(cublasStatus_t, cublasLtMatrixLayoutCreate,
      (cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t))
LT_FN(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t))
LT_FN(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t *))
LT_FN(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t))
LT_FN(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
      (cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t))
LT_FN(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
      (cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
       cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,
       cublasLtMatmulHeuristicResult_t *, int *))
LT_FN(cublasStatus_t, cublasLtMatmul,
      (cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t, const void *,
       cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
       const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t))
LT_FN(cublasStatus_t, cublasLtMatmulAlgoCheck,
      (cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
       cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, cublasLtMatmulHeuristicResult_t *))
