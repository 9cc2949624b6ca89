/*
 * A swdaq plugin for a made-up "streaming board": it samples its channels continuously and
 * sends one UDP packet per time slice,
 *   header (16 bytes, big-endian): magic u16 = 0x5B0A, board id u16, channels u16,
 *                                  samples u16, timestamp u64 (of the slice's first sample)
 *   payload: channels x samples 16-bit ADC values, big-endian, sample by sample
 *            (all channels of sample 0, then of sample 1, ...).
 * It provides two capabilities:
 *   decode             one fragment per packet (a packet may span blocks of a stream); after
 *                      bad bytes it reports an error and skips to the next magic word;
 *   process_fragments  hit finding: a channel's hit opens when a sample exceeds pedestal +
 *                      threshold and closes at the first sample that does not, possibly in a
 *                      later slice; each closed hit is one trigger primitive (start time, time
 *                      over threshold, peak and integral above the pedestal), on channel
 *                      board id x channels_per_board + the board's channel.
 * Configuration (the plugin's TOML table, integers only, all optional):
 *   threshold = 50            ADC counts above the pedestal
 *   pedestal = 0              the baseline every channel sits on
 *   ticks_per_sample = 1      the board's clock ticks between two samples
 *   channels_per_board = 64   spacing of the boards' channel numbers
 *
 * Build: gcc -std=c99 -O2 -shared -fPIC -I include examples/plugins/streaming_board.c \
 *            -o libstreaming_board.so
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swdaq_plugin.h"

#define HEADER_BYTES 16u
#define MAGIC 0x5B0Au
#define MAX_CHANNELS 256u
#define MAX_SAMPLES 4096u

struct hit {
    int open;
    uint64_t start;
    uint32_t samples, peak, integral;
};

struct swdaq_instance {
    char last_error[256];
    uint32_t threshold, pedestal, ticks_per_sample, channels_per_board;
    struct hit hits[MAX_CHANNELS];
};

static uint64_t read_be(const uint8_t *bytes, unsigned width) {
    uint64_t value = 0;
    for (unsigned i = 0; i < width; i++) value = (value << 8) | bytes[i];
    return value;
}

/* Reads `key = value` lines of integers; anything else is refused, naming the line. */
static int configure(swdaq_instance *instance, const char *config, size_t len, char *error,
                     size_t capacity) {
    size_t at = 0;
    while (at < len) {
        size_t end = at;
        while (end < len && config[end] != '\n') end++;
        char line[128] = {0};
        size_t n = end - at < sizeof line - 1 ? end - at : sizeof line - 1;
        memcpy(line, config + at, n);
        at = end + 1;
        char key[64];
        unsigned long value;
        char rest;
        int fields = sscanf(line, " %63[a-z_] = %lu %c", key, &value, &rest);
        if (fields == EOF || (fields <= 0 && strspn(line, " \t\r") == strlen(line))) continue;
        if (fields != 2 || value > 0xFFFFFFFFul) {
            snprintf(error, capacity, "streaming_board: cannot read \"%s\" (key = integer)", line);
            return 0;
        }
        if (strcmp(key, "threshold") == 0) instance->threshold = (uint32_t)value;
        else if (strcmp(key, "pedestal") == 0) instance->pedestal = (uint32_t)value;
        else if (strcmp(key, "ticks_per_sample") == 0) instance->ticks_per_sample = (uint32_t)value;
        else if (strcmp(key, "channels_per_board") == 0) instance->channels_per_board = (uint32_t)value;
        else {
            snprintf(error, capacity, "streaming_board: no such key \"%s\"", key);
            return 0;
        }
    }
    if (instance->ticks_per_sample == 0 || instance->channels_per_board == 0) {
        snprintf(error, capacity, "streaming_board: ticks_per_sample and channels_per_board must be at least 1");
        return 0;
    }
    return 1;
}

static swdaq_instance *create(const char *config, size_t len, char *error, size_t capacity) {
    swdaq_instance *instance = calloc(1, sizeof *instance);
    if (instance == NULL) {
        snprintf(error, capacity, "out of memory");
        return NULL;
    }
    instance->threshold = 50;
    instance->ticks_per_sample = 1;
    instance->channels_per_board = 64;
    if (!configure(instance, config, len, error, capacity)) {
        free(instance);
        return NULL;
    }
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
        uint64_t channels = read_be(header + 4, 2), samples = read_be(header + 6, 2);
        if (read_be(header, 2) != MAGIC || channels == 0 || channels > MAX_CHANNELS ||
            samples == 0 || samples > MAX_SAMPLES) {
            snprintf(instance->last_error, sizeof instance->last_error,
                     "no slice header at byte %zu", position);
            *count = n;
            *consumed = next_magic(block, len, position + 1);
            return SWDAQ_ERROR;
        }
        uint64_t size = HEADER_BYTES + 2 * channels * samples;
        if (len - position < size) break; /* the rest comes with the next block */
        if (n == capacity) {
            *count = n;
            *consumed = position;
            return SWDAQ_NEED_ROOM;
        }
        out[n].offset = position;
        out[n].length = size;
        out[n].source_id = (uint32_t)read_be(header + 2, 2);
        out[n].event_number = 0;
        out[n].timestamp = read_be(header + 8, 8);
        out[n].flags = SWDAQ_FRAGMENT_HAS_TIMESTAMP;
        n++;
        position += size;
    }
    *count = n;
    *consumed = position;
    return SWDAQ_OK;
}

/* Closes channel `c`'s open hit into `out`. */
static void close_hit(swdaq_instance *instance, uint32_t board, uint32_t c,
                      struct swdaq_trigger_primitive *out) {
    struct hit *hit = &instance->hits[c];
    out->timestamp = hit->start;
    out->channel = board * instance->channels_per_board + c;
    out->time_over_threshold = hit->samples * instance->ticks_per_sample;
    out->adc_peak = hit->peak;
    out->adc_integral = hit->integral;
    out->flags = 0;
    out->reserved = 0;
    hit->open = 0;
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
        const uint8_t *bytes = fragment->data;
        uint64_t channels = fragment->length >= HEADER_BYTES ? read_be(bytes + 4, 2) : 0;
        uint64_t samples = fragment->length >= HEADER_BYTES ? read_be(bytes + 6, 2) : 0;
        if (channels == 0 || channels > MAX_CHANNELS ||
            fragment->length != HEADER_BYTES + 2 * channels * samples) {
            snprintf(instance->last_error, sizeof instance->last_error,
                     "fragment %zu is not a whole slice", i);
            *out_count = n;
            *done = i;
            return SWDAQ_ERROR;
        }
        /* The most hits one slice can close: every other sample of every channel, and one. */
        size_t worst = (size_t)(channels * (samples / 2 + 1));
        if (capacity - n < worst) {
            *out_count = n;
            *done = i;
            if (i > 0) return SWDAQ_NEED_ROOM;
            snprintf(instance->last_error, sizeof instance->last_error,
                     "room for %zu primitives, a slice may close %zu", capacity, worst);
            return SWDAQ_ERROR;
        }
        uint32_t board = (uint32_t)read_be(bytes + 2, 2);
        uint64_t start = read_be(bytes + 8, 8);
        for (uint64_t s = 0; s < samples; s++) {
            for (uint32_t c = 0; c < channels; c++) {
                uint32_t adc = (uint32_t)read_be(bytes + HEADER_BYTES + 2 * (s * channels + c), 2);
                uint32_t above = adc > instance->pedestal ? adc - instance->pedestal : 0;
                struct hit *hit = &instance->hits[c];
                if (above > instance->threshold) {
                    if (!hit->open) {
                        hit->open = 1;
                        hit->start = start + s * instance->ticks_per_sample;
                        hit->samples = hit->peak = hit->integral = 0;
                    }
                    hit->samples++;
                    hit->integral += above;
                    if (above > hit->peak) hit->peak = above;
                } else if (hit->open) {
                    close_hit(instance, board, c, &out[n++]);
                }
            }
        }
    }
    *out_count = n;
    *done = count;
    return SWDAQ_OK;
}

static const struct swdaq_plugin descriptor = {
    SWDAQ_PLUGIN_ABI_VERSION,
    sizeof(struct swdaq_plugin),
    "streaming_board",
    "1.0.0",
    create,
    destroy,
    last_error,
    decode,
    NULL,
    process_fragments,
    NULL,
};

const struct swdaq_plugin *swdaq_plugin_v1(void) { return &descriptor; }
