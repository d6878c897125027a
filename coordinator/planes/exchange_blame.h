// Whom a failed exchange round takes out, judged from every member's report
// of it together (docs/scaling.md).
//
// Each failed report names suspects, with its evidence: the members whose
// contribution pieces did not arrive (missing_contributions) and the shard
// owners whose sums did not (missing_sums). A missing sum is no evidence
// against its owner when that owner reports a missing contribution itself:
// it could not sum its shard (its complaint names the link that failed). The
// remaining complaints are links between two members, and one of the two
// is at fault. The members taken out are those of every smallest set that
// touches each such link, so that the redo holds no failed link:
//   - a member every complaint leads to (a dead one, a slow link that
//     failed with several members) is the only one;
//   - one complaint alone cannot say which end failed (the sender's
//     uplink or the receiver's downlink: which of a slow member's pieces
//     got through depends on the order it sent them), and both ends are
//     out of the step (their micro-batches requeued, nothing lost).
// Members that did not report by then are taken out before the links are
// counted, and every link they touch is theirs.
//
// Taken out is not struck (counted towards a release, docs/security.md):
// no member's word alone gets another released. A member out of the round
// is struck only when its failed links run to two or more other members
// and no other member that reported got all of its parts (the others
// corroborate, none contradicts). An accuser is struck when its complaint is
// contradicted: the member it blames was heard from in full by another
// member and does not blame it back (a lie, or a link that failed one way
// only, after every contribution had crossed it).
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace dctrain {

struct RoundReport {
  uint32_t rank = 0;
  bool ok = false;
  std::vector<uint32_t> suspects;  // as the member named them
  std::vector<uint32_t> missing_contributions;
  std::vector<uint32_t> missing_sums;
};

struct RoundBlame {
  std::vector<uint32_t> out;  // ascending
  // Of `out`, those whose failed round counts (ascending): corroborated,
  // or accusers whose complaint was contradicted (`unfounded`, ascending).
  std::vector<uint32_t> struck;
  std::vector<uint32_t> unfounded;
  // Complaints that led to a member, as (the complaining member, the member)
  // pairs, for the log.
  std::vector<std::pair<uint32_t, uint32_t>> links;
};

// `reports`: the round's reports that arrived; `silent`: members of the
// round that did not report (or are gone). Members in `silent` are never in
// the result (they are out already).
//
// `halving_members`: the round's members (ascending) when it ran the halving
// schedule (exchange/schedule.h), else empty. There a member hears only from
// its partners, and waits on them in order (the fold, the levels up, the
// levels down): a member that waited on an earlier stage could not send
// what a later partner lacks, so that partner's complaint against it is no
// evidence (its own complaint names the link that failed), and only its
// partners could have heard it in full.
RoundBlame blame_exchange_round(const std::vector<RoundReport>& reports,
                                const std::set<uint32_t>& silent,
                                const std::vector<uint32_t>& halving_members = {});

}  // namespace dctrain
