// Row-major GEMM over OpenBLAS for float (training) and double (finite-
// difference checks), so a layer is written once as a template.
#pragma once

#include <cblas.h>

namespace dctrain::blas {

enum class Trans { kNo, kYes };

// C (m, n) = alpha * op(A) (m, k) * op(B) (k, n) + beta * C; row-major, with
// leading dimensions equal to the stored row lengths.
template <typename T>
void gemm(Trans trans_a, Trans trans_b, int m, int n, int k, T alpha, const T* a, const T* b,
          T beta, T* c) {
  const CBLAS_TRANSPOSE ta = trans_a == Trans::kYes ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b == Trans::kYes ? CblasTrans : CblasNoTrans;
  const int lda = trans_a == Trans::kYes ? m : k;
  const int ldb = trans_b == Trans::kYes ? k : n;
  if constexpr (sizeof(T) == sizeof(float)) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
  }
}

// The same with explicit leading dimensions, for sub-matrices (one attention
// head's columns, a slice of the vocabulary).
template <typename T>
void gemm(Trans trans_a, Trans trans_b, int m, int n, int k, T alpha, const T* a, int lda,
          const T* b, int ldb, T beta, T* c, int ldc) {
  const CBLAS_TRANSPOSE ta = trans_a == Trans::kYes ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b == Trans::kYes ? CblasTrans : CblasNoTrans;
  if constexpr (sizeof(T) == sizeof(float)) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

}  // namespace dctrain::blas
