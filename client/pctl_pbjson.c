/* pctl_pbjson.c: any protobuf-c message as JSON, generated from its
 * descriptor (`pctl status --json` carries every field of the
 * job's spec, so a field added to parallax.proto cannot be left out).
 *
 * The walk follows protobuf-c's descriptor tables: each field's type,
 * label (proto3 implicit presence, optional with has_ or a pointer,
 * repeated with its count at quantifier_offset), and oneof case. Names are
 * the .proto field names; enums print their value names; 64-bit integers
 * are JSON integers (uint64 above INT64_MAX as a decimal string); bytes as
 * lower-case hex. Pure code. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pctl.h"

static json_t *scalar(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        return json_integer(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        return json_integer(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        return json_integer((json_int_t) * (const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: {
        uint64_t v = *(const uint64_t *)p;
        char buf[24];
        if (v <= (uint64_t)INT64_MAX)
            return json_integer((json_int_t)v);
        snprintf(buf, sizeof(buf), "%" PRIu64, v);
        return json_string(buf);
    }
    case PROTOBUF_C_TYPE_FLOAT:
        return pctl_json_float(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE:
        return json_real(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL:
        return json_boolean(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p);
        return ev ? json_string(ev->name) : json_integer(*(const int *)p);
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return json_string(s ? s : "");
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        char *hex = malloc(2 * b->len + 1);
        json_t *o;
        if (!hex)
            return json_null();
        for (size_t i = 0; i < b->len; i++)
            snprintf(hex + 2 * i, 3, "%02x", b->data[i]);
        hex[2 * b->len] = '\0';
        o = json_string(hex);
        free(hex);
        return o;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(const ProtobufCMessage *const *)p;
        return m ? pctl_json_message(m) : json_null();
    }
    }
    return json_null();
}

/* Bytes one element of a repeated field of this type takes. */
static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_STRING: case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    default:
        return 4;
    }
}

json_t *pctl_json_message(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    json_t *o = json_object();

    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *p = base + f->offset;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) { /* only the member that is set */
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
            json_object_set_new(o, f->name, scalar(f, p));
        } else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *arr = *(const char *const *)p;
            json_t *a = json_array();
            for (size_t k = 0; k < n && arr; k++)
                json_array_append_new(a, scalar(f, arr + k * elem_size(f->type)));
            json_object_set_new(o, f->name, a);
        } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_MESSAGE &&
                   f->type != PROTOBUF_C_TYPE_STRING && f->quantifier_offset &&
                   !*(const protobuf_c_boolean *)(base + f->quantifier_offset)) {
            json_object_set_new(o, f->name, json_null()); /* optional scalar not set */
        } else {
            json_object_set_new(o, f->name, scalar(f, p));
        }
    }
    return o;
}
