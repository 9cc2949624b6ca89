/*
 * swdaq_plugin.h: the C ABI of swdaq plugins (issue #35, "Bring your own detector").
 *
 * A plugin is a shared library exporting ONE symbol, SWDAQ_PLUGIN_ENTRY ("swdaq_plugin_v1"),
 * a function returning a pointer to a static `struct swdaq_plugin`: the plugin's name and
 * version and one function pointer per capability it provides (NULL = not provided):
 *
 *   decode             a front end's bytes (a datagram, a TCP stream's bytes, a file record)
 *                      -> fragment descriptors (where each fragment lies, its source id,
 *                      event number and/or timestamp, flags);
 *   aggregate          one L1 ID's chunks from several e-links -> one ROB fragment payload;
 *   process_fragments  a batch of fragments -> trigger primitives (a detector's hit finding);
 *   filter_events      a batch of events -> per event accept/reject and a stream id.
 *
 * Versioning. The host reads `abi_version` first and refuses a plugin whose version is not
 * SWDAQ_PLUGIN_ABI_VERSION. Within one ABI version the descriptor may only grow at its end;
 * `struct_size` tells the host how much of it the plugin knows, and the host refuses a
 * descriptor shorter than the one of version 1.
 *
 * Results. Every function that can fail returns a swdaq_status. After SWDAQ_ERROR the
 * instance's `last_error` names what went wrong. The host checks everything a plugin returns
 * (counts against capacities, offsets and lengths against the block, bytes consumed against
 * the bytes given, payload lengths against the buffer) before it uses any of it; a value that
 * fails a check is counted and reported as an error of this plugin, never trusted.
 *
 * Threading. The host creates one instance per thread or per source. Calls on one instance are
 * never concurrent, but successive calls may come from different threads (an instance may be
 * moved between threads, e.g. when the host starts its workers). Different instances of one
 * plugin may be called concurrently: a plugin must not share mutable state between instances
 * without its own locking. `swdaq_plugin_v1` itself and `create` may be called from any thread.
 *
 * Native crashes. A plugin runs inside swdaq's process: a segmentation fault, abort or
 * endless loop in a plugin ends (or stalls) the whole process, and no check of the host can
 * prevent it. In a topology of several applications, the launcher names the application that
 * died. Run a plugin you do not trust in an application of its own, so that only that
 * application dies. (Plugins written with the Rust SDK catch their panics at this boundary and
 * turn them into SWDAQ_ERROR with the panic's message.)
 *
 * Plain C99; also valid C++.
 */
#ifndef SWDAQ_PLUGIN_H
#define SWDAQ_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes. */
#define SWDAQ_PLUGIN_ABI_VERSION 1u

/* The name of the one symbol a plugin exports: a `swdaq_plugin_entry_fn`. */
#define SWDAQ_PLUGIN_ENTRY "swdaq_plugin_v1"

/*
 * Status codes. Any other value is a broken plugin: the host counts it as an error.
 *   SWDAQ_OK         done; every output the function documents is valid.
 *   SWDAQ_NEED_ROOM  the host's output buffer is too small; the outputs say how far the plugin
 *                    got (decode, process_fragments) or how much room it needs (aggregate).
 *   SWDAQ_ERROR      the plugin could not do its job; `last_error` says why. The outputs still
 *                    say what was done before the error (see each function).
 */
typedef int32_t swdaq_status;
#define SWDAQ_OK ((swdaq_status)0)
#define SWDAQ_NEED_ROOM ((swdaq_status)1)
#define SWDAQ_ERROR ((swdaq_status)-1)

/*
 * Fragment flags. Bits 0-15 are swdaq's: an unknown one among them is refused by the host.
 * Bits 16-31 are the detector's own and are carried through unread.
 */
#define SWDAQ_FRAGMENT_HAS_EVENT_NUMBER 0x1u /* `event_number` is valid */
#define SWDAQ_FRAGMENT_HAS_TIMESTAMP 0x2u    /* `timestamp` is valid */
#define SWDAQ_FRAGMENT_CORRUPT 0x4u          /* the front end or the decoder found it damaged */
#define SWDAQ_FRAGMENT_TRUNCATED 0x8u        /* shorter than its header says */
#define SWDAQ_FRAGMENT_KNOWN_FLAGS 0xFu
#define SWDAQ_FRAGMENT_DETECTOR_FLAGS 0xFFFF0000u

/* A plugin's per-instance state: opaque to the host. */
typedef struct swdaq_instance swdaq_instance;

/*
 * One fragment found by `decode`. `offset` and `length` are bytes within the block given to
 * that call; the host checks offset + length <= *consumed (no overflow) before using them.
 * Written by the plugin into the host's array; the host owns the array.
 */
struct swdaq_fragment {
    uint64_t offset;
    uint64_t length;
    uint64_t event_number; /* valid if flags & SWDAQ_FRAGMENT_HAS_EVENT_NUMBER */
    uint64_t timestamp;    /* valid if flags & SWDAQ_FRAGMENT_HAS_TIMESTAMP; the detector's clock */
    uint32_t source_id;
    uint32_t flags; /* SWDAQ_FRAGMENT_* */
};

/*
 * One e-link's chunk of an L1 ID, given to `aggregate`. `data` points to `length` bytes owned
 * by the host, valid only during that call.
 */
struct swdaq_chunk {
    const uint8_t *data;
    uint64_t length;
    uint32_t link;
    uint32_t reserved; /* 0 */
};

/*
 * A fragment given to `process_fragments` and `filter_events`: its bytes and what is known of
 * it. `data` points to `length` bytes owned by the host, valid only during that call.
 */
struct swdaq_fragment_ref {
    const uint8_t *data;
    uint64_t length;
    uint64_t event_number;
    uint64_t timestamp;
    uint32_t source_id;
    uint32_t flags;
};

/* One trigger primitive made by `process_fragments`, written into the host's array. */
struct swdaq_trigger_primitive {
    uint64_t timestamp; /* start of the hit, detector clock */
    uint32_t channel;
    uint32_t time_over_threshold; /* clock ticks */
    uint32_t adc_peak;
    uint32_t adc_integral;
    uint32_t flags; /* the detector's own */
    uint32_t reserved; /* 0 */
};

/*
 * One event given to `filter_events`: `fragment_count` fragments at `fragments`, owned by the
 * host and valid only during that call.
 */
struct swdaq_event {
    uint64_t event_number;
    const struct swdaq_fragment_ref *fragments;
    uint64_t fragment_count;
};

/* The decision on one event: `accept` is 0 (reject) or 1 (accept); `stream` is the stream an
 * accepted event is written to (0 = the default stream). The host refuses other `accept`s,
 * and fills the array with one (UINT32_MAX) before the call, so a decision left unwritten is
 * refused too. */
struct swdaq_decision {
    uint32_t accept;
    uint32_t stream;
};

/*
 * The plugin's descriptor: static, owned by the plugin, valid while the library is loaded.
 * The host reads it once at load.
 */
struct swdaq_plugin {
    /* SWDAQ_PLUGIN_ABI_VERSION of the header the plugin was built with. */
    uint32_t abi_version;
    /* sizeof(struct swdaq_plugin) of that header. */
    uint32_t struct_size;
    /* Nul-terminated UTF-8, static: the plugin's name (used in every error the host reports)
     * and its own version. */
    const char *name;
    const char *version;

    /*
     * Makes an instance. `config_toml` is the plugin's own TOML table as text, `config_len`
     * bytes, NOT nul-terminated, valid only during the call (copy what you keep). On failure
     * returns NULL and writes a nul-terminated message of at most `error_capacity` bytes
     * (including the nul) into `error`; the host prints it on one line. Required.
     */
    swdaq_instance *(*create)(const char *config_toml, size_t config_len, char *error,
                              size_t error_capacity);

    /* Frees an instance made by `create`. The host calls it exactly once per instance, after its
     * last call. Required. */
    void (*destroy)(swdaq_instance *instance);

    /*
     * The message of the instance's last SWDAQ_ERROR: nul-terminated, owned by the instance,
     * valid until the next call on that instance. NULL or "" if there is none. Required.
     */
    const char *(*last_error)(const swdaq_instance *instance);

    /*
     * Decodes a block of bytes into fragments. `block` points to `block_len` bytes owned by the
     * host, valid only during the call. The plugin writes at most `out_capacity` fragments into
     * `out`, their count into `*out_count`, and into `*consumed` how many bytes from the block's
     * start it is done with. Every fragment lies within those `*consumed` bytes.
     *
     * Streams: bytes after `*consumed` (the start of a message that continues in the next
     * block) are given again, at the start of the next call's block, followed by new bytes. A
     * datagram or file record decoder consumes the whole block.
     *
     *   SWDAQ_OK         the block was decoded up to `*consumed`.
     *   SWDAQ_NEED_ROOM  `out` filled up: `*out_count` fragments were written and `*consumed`
     *                    covers them; the host calls again with the bytes after `*consumed`.
     *                    Return it only after writing at least one fragment.
     *   SWDAQ_ERROR      the block holds bytes this decoder cannot read. The `*out_count`
     *                    fragments written before are kept; `*consumed` bytes are skipped
     *                    (with `*consumed == 0` the host skips the whole block, so a stream
     *                    always moves on, and checks the fragments against the whole block).
     * Checked by the host: the status; *out_count <= out_capacity; *consumed <= block_len;
     * every fragment's offset + length <= *consumed, without overflow; no unknown swdaq flag
     * bit; progress after SWDAQ_NEED_ROOM. A bad count makes the whole call's output unused;
     * a bad fragment loses only itself.
     * Optional (NULL for a plugin that does not decode).
     */
    swdaq_status (*decode)(swdaq_instance *instance, const uint8_t *block, size_t block_len,
                           struct swdaq_fragment *out, size_t out_capacity, size_t *out_count,
                           size_t *consumed);

    /*
     * Builds one L1 ID's ROB fragment payload from its chunks (`chunk_count` of them, in
     * e-link order; host-owned, valid during the call) into `payload` (`payload_capacity`
     * bytes, host-owned). Writes the payload's length into `*payload_len`.
     *   SWDAQ_OK         `*payload_len` <= `payload_capacity` bytes written.
     *   SWDAQ_NEED_ROOM  nothing usable written; `*payload_len` is the capacity needed. The host
     *                    grows the buffer (up to its limit) and calls once more.
     *   SWDAQ_ERROR      no payload for this L1 ID.
     * Checked by the host: the status; *payload_len <= payload_capacity after SWDAQ_OK; the
     * room asked for against the host's limit; no second SWDAQ_NEED_ROOM. The host's buffer
     * is initialised memory, so bytes the plugin claims but did not write are harmless.
     * Optional.
     */
    swdaq_status (*aggregate)(swdaq_instance *instance, uint32_t l1_id,
                              const struct swdaq_chunk *chunks, size_t chunk_count,
                              uint8_t *payload, size_t payload_capacity, size_t *payload_len);

    /*
     * Finds trigger primitives in a batch of `fragment_count` fragments (host-owned, valid during
     * the call). Writes at most `out_capacity` primitives into `out`, their count into
     * `*out_count`, and into `*fragments_done` how many fragments from the batch's start it has
     * finished (their primitives are all in `out`).
     *   SWDAQ_OK         every fragment done (`*fragments_done == fragment_count`).
     *   SWDAQ_NEED_ROOM  `out` filled up; the host keeps the primitives and calls again with the
     *                    fragments after `*fragments_done` (which must be at least 1).
     *   SWDAQ_ERROR      the primitives written are kept and the fragments up to
     *                    `*fragments_done` are done; the rest of the batch is not processed
     *                    (the host reports the error with the fragments done).
     * Checked by the host: the status; *out_count <= out_capacity; *fragments_done <=
     * fragment_count, equal to it after SWDAQ_OK, and at least 1 after SWDAQ_NEED_ROOM.
     * One instance per link keeps its state between calls, so a hit may span fragments (and
     * calls). Where the primitives drive a trigger (the chain's board links), each must start
     * within the data seen so far and no earlier than the link's `max_hit_ticks` before its
     * end, on a channel of at most 24 bits: any other is counted and not used.
     * Optional.
     */
    swdaq_status (*process_fragments)(swdaq_instance *instance,
                                      const struct swdaq_fragment_ref *fragments,
                                      size_t fragment_count, struct swdaq_trigger_primitive *out,
                                      size_t out_capacity, size_t *out_count,
                                      size_t *fragments_done);

    /*
     * Decides on a batch of `event_count` events (host-owned, valid during the call): writes
     * exactly `event_count` decisions into `decisions` (host-owned, room for `event_count`).
     *   SWDAQ_OK     every decision written.
     *   SWDAQ_ERROR  no decision is used; the host reports the error and decides the batch
     *                by its own configuration (e.g. accept every event).
     * Optional.
     */
    swdaq_status (*filter_events)(swdaq_instance *instance, const struct swdaq_event *events,
                                  size_t event_count, struct swdaq_decision *decisions);
};

/* The type of the entry symbol. It returns the same static descriptor on every call (or NULL,
 * which the host refuses as "not a plugin"). */
typedef const struct swdaq_plugin *(*swdaq_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* SWDAQ_PLUGIN_H */
