// rdma-core's IBVERBS_PRIVATE_34 interface, for the providers programs link
// directly (perftest links libmlx5.so.1 and libefa.so.1 for their direct
// verbs). Their constructors register a driver and the dynamic loader binds
// every symbol they import at load time, so each must exist. No provider
// ever gets a device from us, so none of these does anything: registration
// is a no-op and every command answers EOPNOTSUPP (or NULL). None aborts:
// some run from a constructor.
//
// Their real prototypes live in rdma-core's private driver.h; the callers
// pass arguments in registers that these definitions ignore.
#include <cerrno>
#include <cstddef>

#define SRDMA_PRIVATE_INT(name) \
  extern "C" int name() { return EOPNOTSUPP; }
#define SRDMA_PRIVATE_NULL(name) \
  extern "C" void* name() { return nullptr; }
#define SRDMA_PRIVATE_VOID(name) \
  extern "C" void name() {}

extern "C" {
bool verbs_allow_disassociate_destroy = false;
void __verbs_log(void*, unsigned, const char*, ...) {}
int ibv_read_ibdev_sysfs_file(char*, size_t, const char*, const char*, ...) {
  errno = ENOENT;
  return -1;
}
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void*) { return num_attrs; }
}

SRDMA_PRIVATE_VOID(verbs_register_driver_34)
SRDMA_PRIVATE_VOID(verbs_set_ops)
SRDMA_PRIVATE_VOID(verbs_uninit_context)
SRDMA_PRIVATE_VOID(verbs_init_cq)
SRDMA_PRIVATE_VOID(ibv_get_fw_ver)
SRDMA_PRIVATE_NULL(_verbs_init_and_alloc_context)
SRDMA_PRIVATE_NULL(verbs_open_device)
SRDMA_PRIVATE_INT(execute_ioctl)
SRDMA_PRIVATE_INT(ibv_cmd_advise_mr)
SRDMA_PRIVATE_INT(ibv_cmd_alloc_dm)
SRDMA_PRIVATE_INT(ibv_cmd_alloc_mw)
SRDMA_PRIVATE_INT(ibv_cmd_alloc_pd)
SRDMA_PRIVATE_INT(ibv_cmd_attach_mcast)
SRDMA_PRIVATE_INT(ibv_cmd_close_xrcd)
SRDMA_PRIVATE_INT(ibv_cmd_create_ah)
SRDMA_PRIVATE_INT(ibv_cmd_create_counters)
SRDMA_PRIVATE_INT(ibv_cmd_create_cq)
SRDMA_PRIVATE_INT(ibv_cmd_create_cq_ex)
SRDMA_PRIVATE_INT(ibv_cmd_create_flow)
SRDMA_PRIVATE_INT(ibv_cmd_create_flow_action_esp)
SRDMA_PRIVATE_INT(ibv_cmd_create_qp)
SRDMA_PRIVATE_INT(ibv_cmd_create_qp_ex)
SRDMA_PRIVATE_INT(ibv_cmd_create_qp_ex2)
SRDMA_PRIVATE_INT(ibv_cmd_create_rwq_ind_table)
SRDMA_PRIVATE_INT(ibv_cmd_create_srq)
SRDMA_PRIVATE_INT(ibv_cmd_create_srq_ex)
SRDMA_PRIVATE_INT(ibv_cmd_create_wq)
SRDMA_PRIVATE_INT(ibv_cmd_dealloc_mw)
SRDMA_PRIVATE_INT(ibv_cmd_dealloc_pd)
SRDMA_PRIVATE_INT(ibv_cmd_dereg_mr)
SRDMA_PRIVATE_INT(ibv_cmd_destroy_ah)
SRDMA_PRIVATE_INT(ibv_cmd_destroy_counters)
SRDMA_PRIVATE_INT(ibv_cmd_destroy_cq)
SRDMA_PRIVATE_INT(ibv_cmd_destroy_flow)
SRDMA_PRIVATE_INT(ibv_cmd_destroy_flow_action)
SRDMA_PRIVATE_INT(ibv_cmd_destroy_qp)
SRDMA_PRIVATE_INT(ibv_cmd_destroy_rwq_ind_table)
SRDMA_PRIVATE_INT(ibv_cmd_destroy_srq)
SRDMA_PRIVATE_INT(ibv_cmd_destroy_wq)
SRDMA_PRIVATE_INT(ibv_cmd_detach_mcast)
SRDMA_PRIVATE_INT(ibv_cmd_free_dm)
SRDMA_PRIVATE_INT(ibv_cmd_get_context)
SRDMA_PRIVATE_INT(ibv_cmd_modify_cq)
SRDMA_PRIVATE_INT(ibv_cmd_modify_flow_action_esp)
SRDMA_PRIVATE_INT(ibv_cmd_modify_qp)
SRDMA_PRIVATE_INT(ibv_cmd_modify_qp_ex)
SRDMA_PRIVATE_INT(ibv_cmd_modify_srq)
SRDMA_PRIVATE_INT(ibv_cmd_modify_wq)
SRDMA_PRIVATE_INT(ibv_cmd_open_qp)
SRDMA_PRIVATE_INT(ibv_cmd_open_xrcd)
SRDMA_PRIVATE_INT(ibv_cmd_poll_cq)
SRDMA_PRIVATE_INT(ibv_cmd_post_recv)
SRDMA_PRIVATE_INT(ibv_cmd_post_send)
SRDMA_PRIVATE_INT(ibv_cmd_post_srq_recv)
SRDMA_PRIVATE_INT(ibv_cmd_query_context)
SRDMA_PRIVATE_INT(ibv_cmd_query_device_any)
SRDMA_PRIVATE_INT(ibv_cmd_query_mr)
SRDMA_PRIVATE_INT(ibv_cmd_query_port)
SRDMA_PRIVATE_INT(ibv_cmd_query_qp)
SRDMA_PRIVATE_INT(ibv_cmd_query_srq)
SRDMA_PRIVATE_INT(ibv_cmd_read_counters)
SRDMA_PRIVATE_INT(ibv_cmd_reg_dm_mr)
SRDMA_PRIVATE_INT(ibv_cmd_reg_dmabuf_mr)
SRDMA_PRIVATE_INT(ibv_cmd_reg_mr)
SRDMA_PRIVATE_INT(ibv_cmd_req_notify_cq)
SRDMA_PRIVATE_INT(ibv_cmd_rereg_mr)
SRDMA_PRIVATE_INT(ibv_cmd_resize_cq)
