#pragma once
// `egress update`: UpdateEgress replaces the whole spec, so kibotosctl reads the
// current Egress first and keeps what the command does not restate (address, TLS
// server name and CA, udp_enabled, the username when --password-file is given), and
// sends the revision it read as expected_revision, so a concurrent change is aborted
// instead of overwritten. The password is write-only: an update that would drop
// existing credentials is refused until --password-file, --no-credentials or
// --replace says what is meant. --replace sends the spec exactly as given.
// Labels and annotations are not part of the spec: an update leaves them alone.
#include "agent/common/result.h"
#include "agent/ctl/cli_args.h"
#include "kibotos/ctrl/v1/egress.pb.h"

namespace kib::ctl {

// Flags that contradict each other; checked before anything is sent.
Status check_egress_update_flags(const Invocation& inv);

// Whether the current Egress must be read: always, unless --replace comes with
// --expected-revision.
bool egress_update_needs_current(const Invocation& inv);

// Completes `req`, built from the flags, from `current`. Errors are usage errors.
Status keep_unstated(const Invocation& inv, const kibotos::ctrl::v1::Egress& current,
                     kibotos::ctrl::v1::UpdateEgressRequest& req);

}  // namespace kib::ctl
