/* px_rpc_util.c: protobuf-c messages <-> gRPC byte buffers, status code
 * conversions, the constant-time secret comparison and the bounded file
 * reader px_rpc's users share. Pure functions: any thread. */
#include "px_rpc_int.h"


gpr_timespec px__rpc_deadline(int timeout_ms)
{
    if (timeout_ms < 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

/* Packs `msg` into a new byte buffer (caller destroys it). NULL on OOM. */
grpc_byte_buffer *px__rpc_pack(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice slice = grpc_slice_malloc(len);
    grpc_byte_buffer *bb;
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

grpc_byte_buffer *px__rpc_bytes_buffer(const void *data, size_t len)
{
    grpc_slice slice = grpc_slice_from_copied_buffer(data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

/* Unpacks a received buffer (NULL reads as an empty message). NULL when the
 * bytes do not parse as `desc`. */
ProtobufCMessage *px__rpc_unpack(const ProtobufCMessageDescriptor *desc,
                                        grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader reader;
    grpc_slice slice;
    ProtobufCMessage *msg;

    if (!bb)
        return protobuf_c_message_unpack(desc, NULL, 0, (const uint8_t *)"");
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return NULL;
    slice = grpc_byte_buffer_reader_readall(&reader);
    msg = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(slice),
                                    GRPC_SLICE_START_PTR(slice));
    grpc_slice_unref(slice);
    grpc_byte_buffer_reader_destroy(&reader);
    return msg;
}

char *px__rpc_slice_str(grpc_slice slice)
{
    size_t len = GRPC_SLICE_LENGTH(slice);
    char *s = malloc(len + 1);
    if (!s)
        return NULL;
    memcpy(s, GRPC_SLICE_START_PTR(slice), len);
    s[len] = '\0';
    return s;
}

void px__rpc_fill_result(px_rpc_result_t *result_p, grpc_status_code code, const char *message)
{
    if (!result_p)
        return;
    result_p->code = code;
    result_p->message = message ? strdup(message) : NULL;
}

px_status_t px_rpc_status_from_code(grpc_status_code code)
{
    switch (code) {
    case GRPC_STATUS_OK: return PX_OK;
    case GRPC_STATUS_INVALID_ARGUMENT: return PX_ERR_INVALID_ARGUMENT;
    case GRPC_STATUS_NOT_FOUND: return PX_ERR_NOT_FOUND;
    case GRPC_STATUS_DEADLINE_EXCEEDED: return PX_ERR_TIMEOUT;
    case GRPC_STATUS_UNAVAILABLE: return PX_ERR_UNAVAILABLE;
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return PX_ERR_UNAVAILABLE;
    case GRPC_STATUS_CANCELLED: return PX_ERR_ABORTED;
    case GRPC_STATUS_ALREADY_EXISTS: return PX_ERR_ALREADY_EXISTS;
    case GRPC_STATUS_FAILED_PRECONDITION: return PX_ERR_INVALID_ARGUMENT;
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED: return PX_ERR_INVALID_ARGUMENT;
    default: return PX_ERR_INTERNAL;
    }
}

grpc_status_code px_rpc_code_from_status(px_status_t status)
{
    switch (status) {
    case PX_OK:
    case PX_INPROGRESS: return GRPC_STATUS_OK;
    case PX_ERR_INVALID_ARGUMENT: return GRPC_STATUS_INVALID_ARGUMENT;
    case PX_ERR_NOT_FOUND: return GRPC_STATUS_NOT_FOUND;
    case PX_ERR_TIMEOUT: return GRPC_STATUS_DEADLINE_EXCEEDED;
    case PX_ERR_PEER_FAILURE: return GRPC_STATUS_UNAVAILABLE;
    case PX_ERR_UNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
    case PX_ERR_ABORTED: return GRPC_STATUS_CANCELLED;
    case PX_ERR_ALREADY_EXISTS: return GRPC_STATUS_ALREADY_EXISTS;
    case PX_ERR_MISMATCH: return GRPC_STATUS_FAILED_PRECONDITION;
    case PX_ERR_NO_MEMORY: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case PX_ERR_IO:
    case PX_ERR_INTERNAL: return GRPC_STATUS_INTERNAL;
    }
    return GRPC_STATUS_UNKNOWN;
}

int px_rpc_secret_equal(const void *a, size_t alen, const void *b, size_t blen)
{
    const unsigned char *x = a, *y = b;
    unsigned char diff = 0;
    size_t n = alen > blen ? alen : blen;
    /* Touches max(alen, blen) bytes whatever the contents: the time depends
     * on the lengths only (which are not secret: a token's length leaks
     * nothing useful). */
    for (size_t i = 0; i < n; i++) {
        unsigned char cx = i < alen ? x[i] : 0;
        unsigned char cy = i < blen ? y[i] : 0;
        diff |= (unsigned char)(cx ^ cy);
    }
    return (diff == 0) & (alen == blen);
}

char *px_rpc_read_file(const char *path, size_t max_bytes)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;
    if (!f)
        return NULL;
    buf = malloc(max_bytes + 1);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    n = fread(buf, 1, max_bytes + 1, f);
    if (ferror(f) || n > max_bytes) {
        int err = ferror(f) ? EIO : EFBIG;
        fclose(f);
        explicit_bzero(buf, n);
        free(buf);
        errno = err;
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    return buf;
}
