/* A shared library that is not a swdaq plugin: it has no swdaq_plugin_v1 symbol. */
int not_a_plugin(void) { return 1; }
