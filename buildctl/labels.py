"""The labels buildctl puts on the images it builds and reads back: one place for their names."""

STACK_LABEL = "io.buildctl.stack"
VARIANT_LABEL = "io.buildctl.variant"
LOCK_LABEL = "io.buildctl.lock-hash"  # the variant lock's digest, or "unlocked"
NODE_LABEL = "io.buildctl.node"
KEY_LABEL = "io.buildctl.key"
COMPONENT_LABEL = "io.buildctl.component."  # a prefix: one label per component, its locked source
SMOKE_LABEL = "io.buildctl.smoke"  # the final image's smoke gate: passed or skipped
CREATED_LABEL = "org.opencontainers.image.created"
BASE_NAME_LABEL = "org.opencontainers.image.base.name"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"
