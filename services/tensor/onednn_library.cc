// The oneDNN C functions this build calls, forwarding to libdnnl opened on
// first use (onednn_library.h). Each keeps oneDNN's own declaration (from
// dnnl.h), so gemm.cc and conv2d.cc (and dnnl.hpp) are unchanged; a function
// they start calling must be added here, or the link fails naming it.
#include "services/tensor/onednn_library.h"

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_version.h>

#include "common/shared_library.h"

#define TFJOB_STR2(x) #x
#define TFJOB_STR(x) TFJOB_STR2(x)

namespace tfjob {

// Used by the forwarders below, outside the namespace.
SharedLibrary& OneDnnLibrary() {
  static SharedLibrary library("oneDNN", {"libdnnl.so." TFJOB_STR(DNNL_VERSION_MAJOR)}, TFJOB_DNNL_LIBRARY_DIR);
  return library;
}

namespace {

constexpr const char* kFunctions[] = {
    "dnnl_convolution_backward_data_desc_init",
    "dnnl_convolution_backward_weights_desc_init",
    "dnnl_convolution_forward_desc_init",
    "dnnl_engine_create",
    "dnnl_engine_destroy",
    "dnnl_matmul_desc_init",
    "dnnl_memory_create",
    "dnnl_memory_desc_equal",
    "dnnl_memory_desc_init_by_strides",
    "dnnl_memory_desc_init_by_tag",
    "dnnl_memory_destroy",
    "dnnl_memory_get_engine",
    "dnnl_memory_get_memory_desc",
    "dnnl_post_ops_append_eltwise",
    "dnnl_post_ops_create",
    "dnnl_post_ops_destroy",
    "dnnl_primitive_attr_create",
    "dnnl_primitive_attr_destroy",
    "dnnl_primitive_attr_set_post_ops",
    "dnnl_primitive_create",
    "dnnl_primitive_desc_destroy",
    "dnnl_primitive_desc_iterator_create",
    "dnnl_primitive_desc_iterator_destroy",
    "dnnl_primitive_desc_iterator_fetch",
    "dnnl_primitive_desc_query",
    "dnnl_primitive_desc_query_md",
    "dnnl_primitive_destroy",
    "dnnl_primitive_execute",
    "dnnl_reorder_primitive_desc_create",
    "dnnl_sgemm",
    "dnnl_stream_create",
    "dnnl_stream_destroy",
    "dnnl_stream_wait",
    "dnnl_version",
};

}  // namespace

Status LoadOneDnn() {
  for (const char* f : kFunctions) RETURN_IF_ERROR(OneDnnLibrary().SymbolStatus(f));
  return Status::Ok();
}

}  // namespace tfjob

// oneDNN's `name`, forwarded.
#define TFJOB_ONEDNN_FORWARD(ret, name, params, args, fallback) \
  TFJOB_FORWARD_TO_LIBRARY(tfjob::OneDnnLibrary(), ret, name, params, args, fallback)

extern "C" {

TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_convolution_backward_data_desc_init,
                     (dnnl_convolution_desc_t * conv_desc, dnnl_alg_kind_t alg_kind,
                      const dnnl_memory_desc_t* diff_src_desc, const dnnl_memory_desc_t* weights_desc,
                      const dnnl_memory_desc_t* diff_dst_desc, const dnnl_dims_t strides, const dnnl_dims_t padding_l,
                      const dnnl_dims_t padding_r),
                     (conv_desc, alg_kind, diff_src_desc, weights_desc, diff_dst_desc, strides, padding_l, padding_r),
                     dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_convolution_backward_weights_desc_init,
                     (dnnl_convolution_desc_t * conv_desc, dnnl_alg_kind_t alg_kind, const dnnl_memory_desc_t* src_desc,
                      const dnnl_memory_desc_t* diff_weights_desc, const dnnl_memory_desc_t* diff_bias_desc,
                      const dnnl_memory_desc_t* diff_dst_desc, const dnnl_dims_t strides, const dnnl_dims_t padding_l,
                      const dnnl_dims_t padding_r),
                     (conv_desc, alg_kind, src_desc, diff_weights_desc, diff_bias_desc, diff_dst_desc, strides,
                      padding_l, padding_r),
                     dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_convolution_forward_desc_init,
                     (dnnl_convolution_desc_t * conv_desc, dnnl_prop_kind_t prop_kind, dnnl_alg_kind_t alg_kind,
                      const dnnl_memory_desc_t* src_desc, const dnnl_memory_desc_t* weights_desc,
                      const dnnl_memory_desc_t* bias_desc, const dnnl_memory_desc_t* dst_desc,
                      const dnnl_dims_t strides, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r),
                     (conv_desc, prop_kind, alg_kind, src_desc, weights_desc, bias_desc, dst_desc, strides, padding_l,
                      padding_r),
                     dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_engine_create, (dnnl_engine_t * engine, dnnl_engine_kind_t kind, size_t index),
                     (engine, kind, index), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_engine_destroy, (dnnl_engine_t engine), (engine), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_matmul_desc_init,
                     (dnnl_matmul_desc_t * matmul_desc, const dnnl_memory_desc_t* src_desc,
                      const dnnl_memory_desc_t* weights_desc, const dnnl_memory_desc_t* bias_desc,
                      const dnnl_memory_desc_t* dst_desc),
                     (matmul_desc, src_desc, weights_desc, bias_desc, dst_desc), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_memory_create,
                     (dnnl_memory_t * memory, const dnnl_memory_desc_t* memory_desc, dnnl_engine_t engine,
                      void* handle),
                     (memory, memory_desc, engine, handle), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(int, dnnl_memory_desc_equal, (const dnnl_memory_desc_t* lhs, const dnnl_memory_desc_t* rhs),
                     (lhs, rhs), 0)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_memory_desc_init_by_strides,
                     (dnnl_memory_desc_t * memory_desc, int ndims, const dnnl_dims_t dims, dnnl_data_type_t data_type,
                      const dnnl_dims_t strides),
                     (memory_desc, ndims, dims, data_type, strides), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_memory_desc_init_by_tag,
                     (dnnl_memory_desc_t * memory_desc, int ndims, const dnnl_dims_t dims, dnnl_data_type_t data_type,
                      dnnl_format_tag_t tag),
                     (memory_desc, ndims, dims, data_type, tag), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_memory_destroy, (dnnl_memory_t memory), (memory), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_memory_get_engine, (const_dnnl_memory_t memory, dnnl_engine_t* engine),
                     (memory, engine), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_memory_get_memory_desc,
                     (const_dnnl_memory_t memory, const dnnl_memory_desc_t** memory_desc), (memory, memory_desc),
                     dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_post_ops_append_eltwise,
                     (dnnl_post_ops_t post_ops, float scale, dnnl_alg_kind_t alg_kind, float alpha, float beta),
                     (post_ops, scale, alg_kind, alpha, beta), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_post_ops_create, (dnnl_post_ops_t * post_ops), (post_ops), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_post_ops_destroy, (dnnl_post_ops_t post_ops), (post_ops), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_primitive_attr_create, (dnnl_primitive_attr_t * attr), (attr),
                     dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_primitive_attr_destroy, (dnnl_primitive_attr_t attr), (attr),
                     dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_primitive_attr_set_post_ops,
                     (dnnl_primitive_attr_t attr, const_dnnl_post_ops_t post_ops), (attr, post_ops), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_primitive_create,
                     (dnnl_primitive_t * primitive, const_dnnl_primitive_desc_t primitive_desc),
                     (primitive, primitive_desc), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_primitive_desc_destroy, (dnnl_primitive_desc_t primitive_desc),
                     (primitive_desc), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_primitive_desc_iterator_create,
                     (dnnl_primitive_desc_iterator_t * iterator, const_dnnl_op_desc_t op_desc,
                      const_dnnl_primitive_attr_t attr, dnnl_engine_t engine,
                      const_dnnl_primitive_desc_t hint_forward_primitive_desc),
                     (iterator, op_desc, attr, engine, hint_forward_primitive_desc), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_primitive_desc_iterator_destroy, (dnnl_primitive_desc_iterator_t iterator),
                     (iterator), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_primitive_desc_t, dnnl_primitive_desc_iterator_fetch,
                     (const_dnnl_primitive_desc_iterator_t iterator), (iterator), nullptr)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_primitive_desc_query,
                     (const_dnnl_primitive_desc_t primitive_desc, dnnl_query_t what, int index, void* result),
                     (primitive_desc, what, index, result), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(const dnnl_memory_desc_t*, dnnl_primitive_desc_query_md,
                     (const_dnnl_primitive_desc_t primitive_desc, dnnl_query_t what, int index),
                     (primitive_desc, what, index), nullptr)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_primitive_destroy, (dnnl_primitive_t primitive), (primitive),
                     dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_primitive_execute,
                     (const_dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs, const dnnl_exec_arg_t* args),
                     (primitive, stream, nargs, args), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_reorder_primitive_desc_create,
                     (dnnl_primitive_desc_t * reorder_primitive_desc, const dnnl_memory_desc_t* src_desc,
                      dnnl_engine_t src_engine, const dnnl_memory_desc_t* dst_desc, dnnl_engine_t dst_engine,
                      const_dnnl_primitive_attr_t attr),
                     (reorder_primitive_desc, src_desc, src_engine, dst_desc, dst_engine, attr), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_sgemm,
                     (char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K, float alpha, const float* A,
                      dnnl_dim_t lda, const float* B, dnnl_dim_t ldb, float beta, float* C, dnnl_dim_t ldc),
                     (transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_stream_create, (dnnl_stream_t * stream, dnnl_engine_t engine, unsigned flags),
                     (stream, engine, flags), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_stream_destroy, (dnnl_stream_t stream), (stream), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(dnnl_status_t, dnnl_stream_wait, (dnnl_stream_t stream), (stream), dnnl_runtime_error)
TFJOB_ONEDNN_FORWARD(const dnnl_version_t*, dnnl_version, (), (), nullptr)

}  // extern "C"
