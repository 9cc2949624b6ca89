/*
 * A swdaq plugin for a made-up "triggered board": every trigger, the board sends one packet,
 *   header (20 bytes, big-endian): magic u16 = 0xB0A4, board id u16, trigger number u32,
 *                                  timestamp u64, payload length u32 (bytes)
 *   payload: 16-bit ADC samples, big-endian.
 * It provides all four capabilities:
 *   decode             packets from a stream (a packet may span blocks); after bad bytes it
 *                      reports an error and skips to the next magic word;
 *   aggregate          chunks as records {link u32, length u32, bytes} (big-endian);
 *   process_fragments  one trigger primitive per packet: channel = board id, peak, integral,
 *                      time over threshold = samples above 100;
 *   filter_events      accepts an event into stream 1 when a sample reaches 1000.
 * It takes no configuration keys.
 *
 * Build: gcc -std=c99 -O2 -shared -fPIC -I include examples/plugins/triggered_board.c \
 *            -o libtriggered_board.so
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swdaq_plugin.h"

#define HEADER_BYTES 20u
#define MAGIC 0xB0A4u
#define MAX_PAYLOAD (1u << 20)
#define TOT_THRESHOLD 100u
#define ACCEPT_PEAK 1000u

struct swdaq_instance {
    char last_error[256];
};

static uint64_t read_be(const uint8_t *bytes, unsigned width) {
    uint64_t value = 0;
    for (unsigned i = 0; i < width; i++) value = (value << 8) | bytes[i];
    return value;
}

static void write_be32(uint8_t *bytes, uint32_t value) {
    for (unsigned i = 0; i < 4; i++) bytes[i] = (uint8_t)(value >> (24 - 8 * i));
}

static swdaq_instance *create(const char *config, size_t len, char *error, size_t capacity) {
    for (size_t i = 0; i < len; i++) {
        if (config[i] != ' ' && config[i] != '\n' && config[i] != '\t' && config[i] != '\r') {
            snprintf(error, capacity, "triggered_board takes no configuration keys");
            return NULL;
        }
    }
    swdaq_instance *instance = calloc(1, sizeof *instance);
    if (instance == NULL) snprintf(error, capacity, "out of memory");
    return instance;
}

static void destroy(swdaq_instance *instance) { free(instance); }

static const char *last_error(const swdaq_instance *instance) { return instance->last_error; }

/* The position of the next magic word after `from`, or where a partial one may start. */
static size_t next_magic(const uint8_t *block, size_t len, size_t from) {
    for (size_t i = from; i + 1 < len; i++) {
        if (read_be(block + i, 2) == MAGIC) return i;
    }
    return len > from ? len - 1 : len;
}

static swdaq_status decode(swdaq_instance *instance, const uint8_t *block, size_t len,
                           struct swdaq_fragment *out, size_t capacity, size_t *count,
                           size_t *consumed) {
    size_t position = 0, n = 0;
    *count = 0;
    *consumed = 0;
    while (len - position >= HEADER_BYTES) {
        const uint8_t *header = block + position;
        uint64_t payload = read_be(header + 16, 4);
        if (read_be(header, 2) != MAGIC || payload > MAX_PAYLOAD) {
            snprintf(instance->last_error, sizeof instance->last_error,
                     "no packet header at byte %zu", position);
            *count = n;
            *consumed = next_magic(block, len, position + 1);
            return SWDAQ_ERROR;
        }
        if (len - position < HEADER_BYTES + payload) break; /* the rest comes with the next block */
        if (n == capacity) {
            *count = n;
            *consumed = position;
            return SWDAQ_NEED_ROOM;
        }
        out[n].offset = position;
        out[n].length = HEADER_BYTES + payload;
        out[n].source_id = (uint32_t)read_be(header + 2, 2);
        out[n].event_number = read_be(header + 4, 4);
        out[n].timestamp = read_be(header + 8, 8);
        out[n].flags = SWDAQ_FRAGMENT_HAS_EVENT_NUMBER | SWDAQ_FRAGMENT_HAS_TIMESTAMP;
        n++;
        position += HEADER_BYTES + payload;
    }
    *count = n;
    *consumed = position;
    return SWDAQ_OK;
}

static swdaq_status aggregate(swdaq_instance *instance, uint32_t l1_id,
                              const struct swdaq_chunk *chunks, size_t chunk_count,
                              uint8_t *payload, size_t capacity, size_t *payload_len) {
    size_t needed = 0;
    (void)l1_id;
    for (size_t i = 0; i < chunk_count; i++) {
        if (chunks[i].length > UINT32_MAX) {
            snprintf(instance->last_error, sizeof instance->last_error,
                     "chunk of link %u too long", (unsigned)chunks[i].link);
            return SWDAQ_ERROR;
        }
        needed += 8 + (size_t)chunks[i].length;
    }
    *payload_len = needed;
    if (needed > capacity) return SWDAQ_NEED_ROOM;
    size_t at = 0;
    for (size_t i = 0; i < chunk_count; i++) {
        write_be32(payload + at, chunks[i].link);
        write_be32(payload + at + 4, (uint32_t)chunks[i].length);
        if (chunks[i].length > 0) memcpy(payload + at + 8, chunks[i].data, (size_t)chunks[i].length);
        at += 8 + (size_t)chunks[i].length;
    }
    return SWDAQ_OK;
}

/* The largest sample of a packet's payload. */
static uint32_t peak(const struct swdaq_fragment_ref *fragment) {
    uint32_t max = 0;
    for (uint64_t at = HEADER_BYTES; at + 2 <= fragment->length; at += 2) {
        uint32_t sample = (uint32_t)read_be(fragment->data + at, 2);
        if (sample > max) max = sample;
    }
    return max;
}

static swdaq_status process_fragments(swdaq_instance *instance,
                                      const struct swdaq_fragment_ref *fragments, size_t count,
                                      struct swdaq_trigger_primitive *out, size_t capacity,
                                      size_t *out_count, size_t *done) {
    size_t n = 0;
    *out_count = 0;
    *done = 0;
    for (size_t i = 0; i < count; i++) {
        const struct swdaq_fragment_ref *fragment = &fragments[i];
        if (fragment->length < HEADER_BYTES) {
            snprintf(instance->last_error, sizeof instance->last_error,
                     "fragment %zu is shorter than its header", i);
            *out_count = n;
            *done = i;
            return SWDAQ_ERROR;
        }
        if (n == capacity) {
            *out_count = n;
            *done = i;
            return SWDAQ_NEED_ROOM;
        }
        uint32_t integral = 0, over = 0;
        for (uint64_t at = HEADER_BYTES; at + 2 <= fragment->length; at += 2) {
            uint32_t sample = (uint32_t)read_be(fragment->data + at, 2);
            integral += sample;
            if (sample > TOT_THRESHOLD) over++;
        }
        out[n].timestamp = read_be(fragment->data + 8, 8);
        out[n].channel = (uint32_t)read_be(fragment->data + 2, 2);
        out[n].time_over_threshold = over;
        out[n].adc_peak = peak(fragment);
        out[n].adc_integral = integral;
        out[n].flags = 0;
        out[n].reserved = 0;
        n++;
    }
    *out_count = n;
    *done = count;
    return SWDAQ_OK;
}

static swdaq_status filter_events(swdaq_instance *instance, const struct swdaq_event *events,
                                  size_t count, struct swdaq_decision *decisions) {
    (void)instance;
    for (size_t i = 0; i < count; i++) {
        uint32_t max = 0;
        for (uint64_t f = 0; f < events[i].fragment_count; f++) {
            uint32_t p = peak(&events[i].fragments[f]);
            if (p > max) max = p;
        }
        decisions[i].accept = max >= ACCEPT_PEAK;
        decisions[i].stream = max >= ACCEPT_PEAK ? 1 : 0;
    }
    return SWDAQ_OK;
}

static const struct swdaq_plugin descriptor = {
    SWDAQ_PLUGIN_ABI_VERSION,
    sizeof(struct swdaq_plugin),
    "triggered_board",
    "1.0.0",
    create,
    destroy,
    last_error,
    decode,
    aggregate,
    process_fragments,
    filter_events,
};

const struct swdaq_plugin *swdaq_plugin_v1(void) { return &descriptor; }
