/*
 * A decoder that returns whatever its block tells it to, for the property tests of the host's
 * checks: the block starts with status (i64), count (u64) and consumed (u64), little-endian,
 * followed by raw `struct swdaq_fragment`s, copied into the output up to its capacity. A block
 * shorter than the script is consumed whole with no fragments.
 */
#include <string.h>
#include <stdlib.h>

#include "swdaq_plugin.h"

#define SCRIPT_BYTES 24u

struct swdaq_instance {
    char unused;
};

static swdaq_instance *create(const char *config, size_t len, char *error, size_t capacity) {
    (void)config;
    (void)len;
    (void)error;
    (void)capacity;
    return calloc(1, sizeof(swdaq_instance));
}

static void destroy(swdaq_instance *instance) { free(instance); }

static const char *last_error(const swdaq_instance *instance) {
    (void)instance;
    return "scripted error";
}

static swdaq_status decode(swdaq_instance *instance, const uint8_t *block, size_t len,
                           struct swdaq_fragment *out, size_t capacity, size_t *count,
                           size_t *consumed) {
    int64_t status;
    uint64_t script_count, script_consumed;
    (void)instance;
    if (len < SCRIPT_BYTES) {
        *count = 0;
        *consumed = len;
        return SWDAQ_OK;
    }
    memcpy(&status, block, 8);
    memcpy(&script_count, block + 8, 8);
    memcpy(&script_consumed, block + 16, 8);
    size_t available = (len - SCRIPT_BYTES) / sizeof(struct swdaq_fragment);
    size_t n = available < capacity ? available : capacity;
    memcpy(out, block + SCRIPT_BYTES, n * sizeof(struct swdaq_fragment));
    *count = (size_t)script_count;
    *consumed = (size_t)script_consumed;
    return (swdaq_status)status;
}

static const struct swdaq_plugin descriptor = {
    SWDAQ_PLUGIN_ABI_VERSION, sizeof(struct swdaq_plugin), "scripted", "0", create, destroy,
    last_error, decode, NULL, NULL, NULL,
};

const struct swdaq_plugin *swdaq_plugin_v1(void) { return &descriptor; }
