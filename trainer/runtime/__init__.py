"""The pure build: the intermediate representation, runtimePatches merge, the plugin
framework and naming."""
