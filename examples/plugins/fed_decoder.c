/*
 * A swdaq decoder plugin for CMS FED fragments, written from the layout CMS documents
 * (cms-sw/cmssw DataFormats/FEDRawData/src/fed_header.h and fed_trailer.h): the same header
 * and trailer checks swdaq's readout units make, without the CRC-16, so `swdaq bench plugin`
 * can set the cost of the plugin interface against swdaq's own code doing the same work.
 *
 * A block is one event's FED data: fragments back to back, each a 64-bit little-endian
 * header word, whole payload words and a trailer word. As CMS reads them, fragments are found
 * backwards from the last trailer (its length field gives the fragment's start); they are
 * returned in the order they lie in the block. Checks: the trailer's EOE marker (0xA), a
 * length of at least two words that fits what is left, the header's BOE marker (0x5). The
 * first fragment that fails ends the walk: what lies before it has no known end, so the
 * whole block is reported bad (SWDAQ_ERROR) with the fragments after it kept.
 * Each fragment's source id is the FED id (header bits 8..20), its event number the level-1
 * id (header bits 32..56). It takes no configuration keys.
 *
 * Build: gcc -std=c99 -O2 -shared -fPIC -I include examples/plugins/fed_decoder.c \
 *            -o libfed_decoder.so
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swdaq_plugin.h"

#define WORD 8u

struct swdaq_instance {
    char last_error[256];
};

/* A little-endian word, read with one load (a byte-at-a-time loop cost more than the
 * checks themselves). */
static uint64_t word_at(const uint8_t *bytes) {
    uint64_t value;
    memcpy(&value, bytes, sizeof value);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    value = __builtin_bswap64(value);
#endif
    return value;
}

static swdaq_instance *create(const char *config, size_t len, char *error, size_t capacity) {
    for (size_t i = 0; i < len; i++) {
        if (config[i] != ' ' && config[i] != '\n' && config[i] != '\t' && config[i] != '\r') {
            snprintf(error, capacity, "fed_decoder takes no configuration keys");
            return NULL;
        }
    }
    swdaq_instance *instance = calloc(1, sizeof *instance);
    if (instance == NULL) snprintf(error, capacity, "out of memory");
    return instance;
}

static void destroy(swdaq_instance *instance) { free(instance); }

static const char *last_error(const swdaq_instance *instance) { return instance->last_error; }

/* Writes the fragments found from `end` backwards into out[capacity - 1], out[capacity - 2],
 * ...; returns how many, or stops at the first bad one with *bad set. */
static size_t walk_back(swdaq_instance *instance, const uint8_t *block, size_t end,
                        struct swdaq_fragment *out, size_t capacity, int *bad) {
    size_t n = 0;
    *bad = 0;
    while (end > 0) {
        if (end < 2 * WORD || n == capacity) {
            snprintf(instance->last_error, sizeof instance->last_error,
                     n == capacity ? "more fragments than room" : "%zu bytes left before a fragment",
                     end);
            *bad = 1;
            return n;
        }
        uint64_t trailer = word_at(block + end - WORD);
        uint64_t words = (trailer >> 32) & 0xFFFFFFu;
        if (trailer >> 60 != 0xAu || words < 2 || words * WORD > end) {
            snprintf(instance->last_error, sizeof instance->last_error,
                     "no FED trailer ending at byte %zu", end);
            *bad = 1;
            return n;
        }
        size_t start = end - (size_t)words * WORD;
        uint64_t header = word_at(block + start);
        if (header >> 60 != 0x5u) {
            snprintf(instance->last_error, sizeof instance->last_error,
                     "no FED header at byte %zu", start);
            *bad = 1;
            return n;
        }
        struct swdaq_fragment *f = &out[capacity - 1 - n];
        f->offset = start;
        f->length = end - start;
        f->source_id = (uint32_t)((header >> 8) & 0xFFFu);
        f->event_number = (header >> 32) & 0xFFFFFFu;
        f->timestamp = 0;
        f->flags = SWDAQ_FRAGMENT_HAS_EVENT_NUMBER;
        n++;
        end = start;
    }
    return n;
}

static swdaq_status decode(swdaq_instance *instance, const uint8_t *block, size_t len,
                           struct swdaq_fragment *out, size_t capacity, size_t *count,
                           size_t *consumed) {
    int bad = 0;
    /* Whole words only: a ragged tail is no fragment's. */
    size_t n = walk_back(instance, block, len - len % WORD, out, capacity, &bad);
    /* Found last first at the end of `out`: move them to its start, in block order. */
    memmove(out, out + capacity - n, n * sizeof *out);
    *count = n;
    *consumed = len;
    return bad || len % WORD != 0 ? SWDAQ_ERROR : SWDAQ_OK;
}

static const struct swdaq_plugin PLUGIN = {
    .abi_version = SWDAQ_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(struct swdaq_plugin),
    .name = "fed_decoder",
    .version = "1.0",
    .create = create,
    .destroy = destroy,
    .last_error = last_error,
    .decode = decode,
};

const struct swdaq_plugin *swdaq_plugin_v1(void) { return &PLUGIN; }
