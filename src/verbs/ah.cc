// Address handles (UD).
#include "errors.h"
#include "objects.h"

using namespace srdma::verbs;

extern "C" {

ibv_ah* ibv_create_ah(ibv_pd*, ibv_ah_attr*) {
  return fail_null<ibv_ah>("ibv_create_ah", EOPNOTSUPP, "UD is not supported yet");
}
int ibv_destroy_ah(ibv_ah*) { return fail("ibv_destroy_ah", EOPNOTSUPP, "no AHs"); }
int ibv_init_ah_from_wc(ibv_context*, std::uint8_t, ibv_wc*, ibv_grh*, ibv_ah_attr*) {
  return fail("ibv_init_ah_from_wc", EOPNOTSUPP, "no UD");
}
ibv_ah* ibv_create_ah_from_wc(ibv_pd*, ibv_wc*, ibv_grh*, std::uint8_t) {
  return fail_null<ibv_ah>("ibv_create_ah_from_wc", EOPNOTSUPP, "UD is not supported yet");
}

}  // extern "C"
