/* softrdma's private interface between libibverbs.so.1 and librdmacm.so.1
   (version node SOFTRDMA_PRIVATE_1): the InfiniBand CM (src/cm's CmAgent)
   of the device behind an ibv_context, in plain C, so that librdmacm drives
   the one agent the device has without a second copy of the core.

   Functions return 0 or an errno value (errno is set too). Events come on
   the agent's thread, one at a time; a handler may call back in (accept
   from a REQ, ready from a REP). No handler of an ID runs after
   srdma_cm_destroy() returns, nor of a listener after
   srdma_cm_stop_listening(). Addresses are IPv4, host order; on a device
   on IPv6, peer_ipv4 is 0 and peer_gid (the peer's IPv6 address as its
   GID) names the peer instead. A caller's peer_gid of all zeros means
   "use peer_ipv4". */
#ifndef SRDMA_CM_PRIVATE_H
#define SRDMA_CM_PRIVATE_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct srdma_cm; /* a reference on one device's CM agent */

enum srdma_cm_event_type {
	SRDMA_CM_REQ_RECEIVED,	/* passive: a new ID; accept or reject it */
	SRDMA_CM_REP_RECEIVED,	/* active: move the QP to RTR/RTS, then ready() */
	SRDMA_CM_ESTABLISHED,	/* passive: the RTU came */
	SRDMA_CM_REJECTED,	/* rej_reason, private data */
	SRDMA_CM_TIMED_OUT,	/* no answer after every retry */
	SRDMA_CM_DISCONNECTED,	/* DREQ or DREP came, or the DREQ timed out */
	SRDMA_CM_TIMEWAIT_EXIT,	/* after DISCONNECTED: time wait is over */
	SRDMA_CM_SIDR_REQ_RECEIVED, /* passive, UD: a new ID; srdma_cm_sidr_reply() to it */
	SRDMA_CM_SIDR_REP_RECEIVED, /* active, UD: sidr_status, qpn, qkey (TIMED_OUT when none came) */
};

/* REQ and REP fields as the receiver sees them (responder_resources and
   initiator_depth are the sender's, not swapped). */
struct srdma_cm_event {
	enum srdma_cm_event_type type;
	uint32_t id;		/* the connection's local comm ID */
	uint32_t peer_ipv4;
	uint64_t service_id;	/* REQ */
	uint32_t qpn;		/* REQ, REP: the sender's QP */
	uint32_t starting_psn;	/* REQ, REP */
	enum ibv_mtu path_mtu;	/* REQ */
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t retry_count;	/* REQ */
	uint8_t rnr_retry_count;
	uint8_t flow_control;
	uint8_t srq;
	uint16_t rej_reason;	/* REJECTED: IBA's reason */
	uint8_t sidr_status;	/* SIDR_REP_RECEIVED: IBA's status, 0 for success */
	uint32_t qkey;		/* SIDR_REP_RECEIVED */
	uint8_t private_data_len; /* the whole message's private data */
	const uint8_t *private_data;
	uint8_t peer_gid[16];	/* the peer's GID (IPv4-mapped for an IPv4 peer) */
};

typedef void (*srdma_cm_handler)(const struct srdma_cm_event *event, void *context);

struct srdma_cm_connect_params {
	uint32_t peer_ipv4;
	uint64_t service_id;
	uint32_t local_qpn;
	uint32_t starting_psn;
	enum ibv_mtu path_mtu;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t local_ack_timeout;	/* 5 bits: the path's */
	uint8_t response_timeout;	/* CM response timeout, IBA's encoding */
	uint8_t max_cm_retries;
	const void *private_data;	/* at most 92 bytes */
	size_t private_data_len;
	uint8_t peer_gid[16];		/* an IPv6 peer (peer_ipv4 0) */
};

struct srdma_cm_reply {
	uint32_t local_qpn;
	uint32_t starting_psn;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t rnr_retry_count;
	uint8_t srq;
	const void *private_data;	/* at most 196 bytes */
	size_t private_data_len;
};

/* Service ID resolution for UD (IBA 12.11). */
struct srdma_cm_sidr_params {
	uint32_t peer_ipv4;
	uint64_t service_id;
	uint8_t response_timeout;	/* each try's wait, IBA's encoding (0: the CM's default) */
	uint8_t max_cm_retries;		/* (0: the CM's default) */
	const void *private_data;	/* at most 216 bytes */
	size_t private_data_len;
	uint8_t peer_gid[16];		/* an IPv6 peer (peer_ipv4 0) */
};

/* A reference on the agent of the context's device (created on first use). */
struct srdma_cm *srdma_cm_open(struct ibv_context *context);
void srdma_cm_close(struct srdma_cm *cm);

int srdma_cm_listen(struct srdma_cm *cm, uint64_t service_id, srdma_cm_handler handler, void *context);
void srdma_cm_stop_listening(struct srdma_cm *cm, uint64_t service_id);
int srdma_cm_connect(struct srdma_cm *cm, const struct srdma_cm_connect_params *params,
		     srdma_cm_handler handler, void *context, uint32_t *id);
int srdma_cm_accept(struct srdma_cm *cm, uint32_t id, const struct srdma_cm_reply *reply,
		    srdma_cm_handler handler, void *context);
int srdma_cm_reject(struct srdma_cm *cm, uint32_t id, const void *private_data, size_t len);
int srdma_cm_ready(struct srdma_cm *cm, uint32_t id);
int srdma_cm_disconnect(struct srdma_cm *cm, uint32_t id);
void srdma_cm_destroy(struct srdma_cm *cm, uint32_t id);
int srdma_cm_sidr_request(struct srdma_cm *cm, const struct srdma_cm_sidr_params *params,
			  srdma_cm_handler handler, void *context, uint32_t *id);
/* The SIDR_REP to a SIDR_REQ_RECEIVED: status 0 with the QP's number and
   Q_Key, or a refusal (IBA's SIDR status, e.g. 2 "rejected"); private
   data at most 136 bytes. */
int srdma_cm_sidr_reply(struct srdma_cm *cm, uint32_t id, uint8_t status, uint32_t qpn, uint32_t qkey,
			const void *private_data, size_t len);

/* poll(2) for a consumer of `context`'s device that waits for its
   completions (rsockets' blocking calls and rpoll): while it waits, the
   calling thread receives from the device's wire (as a thread blocked in
   ibv_get_cq_event does), so the completion events that what arrives makes
   are made by this thread. A plain poll(2) on a completion channel's fd
   after an empty ibv_poll_cq waits for the receive thread, which stands
   aside for a consumer that polls. poll's result; -1 with errno. */
struct pollfd;
int srdma_poll_receiving(struct ibv_context *context, struct pollfd *fds, unsigned long nfds, int timeout);

#ifdef __cplusplus
}
#endif

#endif /* SRDMA_CM_PRIVATE_H */
