/*
 * A decoder that breaks the ABI's contract in one way, chosen at build time with -DFAULT=...,
 * so each of the host's checks can be tested. Otherwise it decodes fixed 8-byte records:
 * source id u32 LE, event number u32 LE; a record starting with 0xFF is "bad".
 *   FAULT_NONE             (default) behaves
 *   FAULT_OUT_OF_BLOCK     the second fragment lies past the bytes consumed
 *   FAULT_ABOVE_CAPACITY   returns one more fragment than there is room for
 *   FAULT_CONSUMED         consumes more bytes than the block has
 *   FAULT_STATUS           returns status 7
 *   FAULT_FLAGS            sets an undefined swdaq flag bit on every fragment
 *   FAULT_CREATE           create fails
 *   FAULT_ABI              says it is ABI version 99
 *   FAULT_SMALL            says its descriptor is 16 bytes
 *   FAULT_NULL_NAME        has no name
 *   FAULT_NO_PROGRESS      asks for room having written nothing
 *   FAULT_PAYLOAD_LONG     aggregate: says it wrote one byte more than the buffer holds
 *   FAULT_ROOM_TWICE       aggregate: asks for room again after getting it
 *   FAULT_DECISION         filter_events: accept = 2
 *   FAULT_UNDECIDED        filter_events: returns OK without writing the last decision
 * aggregate and filter_events exist only in the builds that break them.
 * A bad record makes decode return SWDAQ_ERROR, keeping the fragments before it and
 * consuming the bad record.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swdaq_plugin.h"

#define FAULT_NONE 0
#define FAULT_OUT_OF_BLOCK 1
#define FAULT_ABOVE_CAPACITY 2
#define FAULT_CONSUMED 3
#define FAULT_STATUS 4
#define FAULT_FLAGS 5
#define FAULT_CREATE 6
#define FAULT_ABI 7
#define FAULT_SMALL 8
#define FAULT_NULL_NAME 9
#define FAULT_NO_PROGRESS 10
#define FAULT_PAYLOAD_LONG 11
#define FAULT_ROOM_TWICE 12
#define FAULT_DECISION 13
#define FAULT_UNDECIDED 14
#ifndef FAULT
#define FAULT FAULT_NONE
#endif

struct swdaq_instance {
    char last_error[128];
};

static swdaq_instance *create(const char *config, size_t len, char *error, size_t capacity) {
    (void)config;
    (void)len;
    if (FAULT == FAULT_CREATE) {
        snprintf(error, capacity, "no calibration\nfile for board 3");
        return NULL;
    }
    return calloc(1, sizeof(swdaq_instance));
}

static void destroy(swdaq_instance *instance) { free(instance); }

static const char *last_error(const swdaq_instance *instance) { return instance->last_error; }

static uint32_t read_le32(const uint8_t *bytes) {
    return (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 |
           (uint32_t)bytes[3] << 24;
}

static swdaq_status decode(swdaq_instance *instance, const uint8_t *block, size_t len,
                           struct swdaq_fragment *out, size_t capacity, size_t *count,
                           size_t *consumed) {
    size_t n = 0, at = 0;
    if (FAULT == FAULT_NO_PROGRESS) {
        *count = 0;
        *consumed = 0;
        return SWDAQ_NEED_ROOM;
    }
    for (; at + 8 <= len && n < capacity; at += 8) {
        if (block[at] == 0xFF) {
            snprintf(instance->last_error, sizeof instance->last_error, "bad record at byte %zu", at);
            *count = n;
            *consumed = at + 8;
            return SWDAQ_ERROR;
        }
        out[n].offset = at;
        out[n].length = 8;
        out[n].source_id = read_le32(block + at);
        out[n].event_number = read_le32(block + at + 4);
        out[n].timestamp = 0;
        out[n].flags = SWDAQ_FRAGMENT_HAS_EVENT_NUMBER;
        if (FAULT == FAULT_OUT_OF_BLOCK && n == 1) out[n].offset = len;
        if (FAULT == FAULT_FLAGS) out[n].flags |= 0x100;
        n++;
    }
    *count = FAULT == FAULT_ABOVE_CAPACITY ? capacity + 1 : n;
    *consumed = FAULT == FAULT_CONSUMED ? len + 1 : at;
    if (FAULT == FAULT_STATUS) return 7;
    return at + 8 <= len ? SWDAQ_NEED_ROOM : SWDAQ_OK;
}

#if FAULT == FAULT_PAYLOAD_LONG || FAULT == FAULT_ROOM_TWICE
static swdaq_status aggregate(swdaq_instance *instance, uint32_t l1_id,
                              const struct swdaq_chunk *chunks, size_t chunk_count,
                              uint8_t *payload, size_t capacity, size_t *payload_len) {
    (void)instance;
    (void)l1_id;
    (void)chunks;
    (void)chunk_count;
    (void)payload;
    *payload_len = FAULT == FAULT_PAYLOAD_LONG ? capacity + 1 : 4;
    return FAULT == FAULT_PAYLOAD_LONG ? SWDAQ_OK : SWDAQ_NEED_ROOM;
}
#else
#define aggregate NULL
#endif

#if FAULT == FAULT_DECISION || FAULT == FAULT_UNDECIDED
static swdaq_status filter_events(swdaq_instance *instance, const struct swdaq_event *events,
                                  size_t count, struct swdaq_decision *decisions) {
    (void)instance;
    (void)events;
    size_t decided = FAULT == FAULT_UNDECIDED && count > 0 ? count - 1 : count;
    for (size_t i = 0; i < decided; i++) {
        decisions[i].accept = FAULT == FAULT_DECISION ? 2 : 1;
        decisions[i].stream = 0;
    }
    return SWDAQ_OK;
}
#else
#define filter_events NULL
#endif

static const struct swdaq_plugin descriptor = {
    FAULT == FAULT_ABI ? 99u : SWDAQ_PLUGIN_ABI_VERSION,
    FAULT == FAULT_SMALL ? 16u : (uint32_t)sizeof(struct swdaq_plugin),
    FAULT == FAULT_NULL_NAME ? NULL : "faulty",
    "0",
    create,
    destroy,
    last_error,
    decode,
    aggregate,
    NULL,
    filter_events,
};

const struct swdaq_plugin *swdaq_plugin_v1(void) { return &descriptor; }
