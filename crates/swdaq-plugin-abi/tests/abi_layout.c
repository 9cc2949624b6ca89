/*
 * Prints the size of every struct of swdaq_plugin.h and the offset of every field, one per
 * line ("struct size N", "struct.field N"), for the Rust mirrors' layout tests to compare.
 */
#include <stddef.h>
#include <stdio.h>

#include "swdaq_plugin.h"

#define SIZE(s) printf(#s " size %zu\n", sizeof(struct s))
#define FIELD(s, f) printf(#s "." #f " %zu\n", offsetof(struct s, f))

int main(void) {
    SIZE(swdaq_fragment);
    FIELD(swdaq_fragment, offset);
    FIELD(swdaq_fragment, length);
    FIELD(swdaq_fragment, event_number);
    FIELD(swdaq_fragment, timestamp);
    FIELD(swdaq_fragment, source_id);
    FIELD(swdaq_fragment, flags);
    SIZE(swdaq_chunk);
    FIELD(swdaq_chunk, data);
    FIELD(swdaq_chunk, length);
    FIELD(swdaq_chunk, link);
    FIELD(swdaq_chunk, reserved);
    SIZE(swdaq_fragment_ref);
    FIELD(swdaq_fragment_ref, data);
    FIELD(swdaq_fragment_ref, length);
    FIELD(swdaq_fragment_ref, event_number);
    FIELD(swdaq_fragment_ref, timestamp);
    FIELD(swdaq_fragment_ref, source_id);
    FIELD(swdaq_fragment_ref, flags);
    SIZE(swdaq_trigger_primitive);
    FIELD(swdaq_trigger_primitive, timestamp);
    FIELD(swdaq_trigger_primitive, channel);
    FIELD(swdaq_trigger_primitive, time_over_threshold);
    FIELD(swdaq_trigger_primitive, adc_peak);
    FIELD(swdaq_trigger_primitive, adc_integral);
    FIELD(swdaq_trigger_primitive, flags);
    FIELD(swdaq_trigger_primitive, reserved);
    SIZE(swdaq_event);
    FIELD(swdaq_event, event_number);
    FIELD(swdaq_event, fragments);
    FIELD(swdaq_event, fragment_count);
    SIZE(swdaq_decision);
    FIELD(swdaq_decision, accept);
    FIELD(swdaq_decision, stream);
    SIZE(swdaq_plugin);
    FIELD(swdaq_plugin, abi_version);
    FIELD(swdaq_plugin, struct_size);
    FIELD(swdaq_plugin, name);
    FIELD(swdaq_plugin, version);
    FIELD(swdaq_plugin, create);
    FIELD(swdaq_plugin, destroy);
    FIELD(swdaq_plugin, last_error);
    FIELD(swdaq_plugin, decode);
    FIELD(swdaq_plugin, aggregate);
    FIELD(swdaq_plugin, process_fragments);
    FIELD(swdaq_plugin, filter_events);
    printf("ABI_VERSION %u\n", SWDAQ_PLUGIN_ABI_VERSION);
    printf("ENTRY %s\n", SWDAQ_PLUGIN_ENTRY);
    printf("OK %d NEED_ROOM %d ERROR %d\n", (int)SWDAQ_OK, (int)SWDAQ_NEED_ROOM, (int)SWDAQ_ERROR);
    printf("FLAGS %#x %#x\n", SWDAQ_FRAGMENT_KNOWN_FLAGS, SWDAQ_FRAGMENT_DETECTOR_FLAGS);
    return 0;
}
