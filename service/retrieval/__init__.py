"""The search path past the handler: ranking, snapshots, store indexes, verify passes."""
