package overlay

import "golang.org/x/sys/unix"

// Flags are the mount flags of the overlay and of the scratch tmpfs under it: no
// set-id bit and no device node in HOME takes effect.
const Flags = unix.MS_NOSUID | unix.MS_NODEV
