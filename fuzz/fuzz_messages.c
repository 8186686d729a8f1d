/* fuzz_messages.c: libFuzzer target for every protobuf message parallaxd
 * decodes, as a server (Control and Peer requests) and as a client (the
 * answers of other daemons it relays or acts on).
 *
 * The first input byte picks the message type, the rest is the wire bytes.
 * A decoded message is re-encoded (the packed size must be what
 * get_packed_size said) and decoded again; that second decode may fail and
 * may give a smaller size: protobuf-c 1.4 keeps unknown fields, accepts the
 * invalid field number 0 when written as a non-minimal varint (0x80 0x00),
 * re-encodes it minimally (0x00) and then refuses its own output (see
 * corpus/messages/regress-field0-nonminimal). The daemon's relays re-encode
 * answers of other daemons, so such an answer reaches pctl as a decode
 * error, not a crash. And a decoded JobSpec (alone or inside a
 * SubmitJob or LaunchRanks request) goes through the daemon's validation
 * (px_validate_spec), which reads the named data file's header: the same
 * path a SubmitJob takes before anything is stored. Any crash, leak or
 * sanitizer report is a bug. Single-threaded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

static const ProtobufCMessageDescriptor *const descs[] = {
    /* Control requests */
    &parallax__v1__submit_job_request__descriptor,
    &parallax__v1__get_job_request__descriptor,
    &parallax__v1__list_jobs_request__descriptor,
    &parallax__v1__cancel_job_request__descriptor,
    &parallax__v1__watch_job_request__descriptor,
    &parallax__v1__list_nodes_request__descriptor,
    &parallax__v1__get_metrics_request__descriptor,
    &parallax__v1__get_logs_request__descriptor,
    /* Peer requests */
    &parallax__v1__heartbeat_request__descriptor,
    &parallax__v1__launch_ranks_request__descriptor,
    &parallax__v1__stop_ranks_request__descriptor,
    &parallax__v1__rank_exited_request__descriptor,
    &parallax__v1__register_rank_request__descriptor,
    &parallax__v1__report_progress_request__descriptor,
    /* answers decoded as a client (relays, heartbeats, launches) */
    &parallax__v1__job__descriptor,
    &parallax__v1__list_jobs_response__descriptor,
    &parallax__v1__get_metrics_response__descriptor,
    &parallax__v1__get_logs_response__descriptor,
    &parallax__v1__heartbeat_response__descriptor,
    &parallax__v1__launch_ranks_response__descriptor,
    &parallax__v1__list_nodes_response__descriptor,
    &parallax__v1__submit_job_response__descriptor,
    &parallax__v1__job_spec__descriptor,
    /* added later, so the corpus's selector bytes keep their messages */
    &parallax__v1__get_memory_request__descriptor,  /* Control.GetMemory */
    &parallax__v1__reserve_name_request__descriptor, /* Peer.ReserveName */
    &parallax__v1__get_memory_response__descriptor, /* relayed from the coordinator */
    &parallax__v1__sample_request__descriptor,      /* Control.Sample (with a JobSpec) */
    &parallax__v1__sample_response__descriptor,     /* relayed from the node that ran it */
    &parallax__v1__set_node_state_request__descriptor, /* Control and Peer.SetNodeState */
    &parallax__v1__node_info__descriptor, /* Peer.SetNodeState's answer, relayed */
};
#define N_DESCS (sizeof(descs) / sizeof(descs[0]))

static void validate(const Parallax__V1__JobSpec *spec)
{
    char err[1024];
    int counts[2] = {1 + (int)(spec ? spec->seed % 64 : 0), (int)(spec ? spec->seed % 5 : 0)};
    if (spec)
        (void)px_validate_spec(spec, counts, 2, err, sizeof(err));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const ProtobufCMessageDescriptor *desc;
    ProtobufCMessage *msg, *again;
    uint8_t *buf;
    size_t n, n2;

    if (size < 1)
        return 0;
    desc = descs[data[0] % N_DESCS];
    msg = protobuf_c_message_unpack(desc, NULL, size - 1, data + 1);
    if (!msg)
        return 0;
    if (desc == &parallax__v1__submit_job_request__descriptor)
        validate(((Parallax__V1__SubmitJobRequest *)msg)->spec);
    else if (desc == &parallax__v1__launch_ranks_request__descriptor)
        validate(((Parallax__V1__LaunchRanksRequest *)msg)->spec);
    else if (desc == &parallax__v1__job_spec__descriptor)
        validate((Parallax__V1__JobSpec *)msg);

    n = protobuf_c_message_get_packed_size(msg);
    buf = malloc(n ? n : 1);
    if (!buf)
        abort();
    if (protobuf_c_message_pack(msg, buf) != n)
        abort();
    again = protobuf_c_message_unpack(desc, NULL, n, buf);
    if (again) {
        n2 = protobuf_c_message_get_packed_size(again);
        if (n2 > n)
            abort();
        protobuf_c_message_free_unpacked(again, NULL);
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    free(buf);
    return 0;
}
