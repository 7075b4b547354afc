// ParentOnly<T>: owns an object whose threads exist only in the process that
// built it (a prefetcher's producer, a parallel map's workers, and the state
// they share). A child forked from that process without exec neither uses
// nor destroys its copy: get() raises FailedPreconditionError there instead
// of waiting for a thread that will never answer, and the destructor leaves
// the object as it is, thread handles included (the parent's threads may
// have been inside it, or holding its locks, at the fork; detaching a
// parent's handle would act on whichever thread of the child reuses its
// memory). See distribute/internal/owner_process.h.
#pragma once

#include <memory>
#include <string>

#include "distribute/errors.h"
#include "distribute/internal/owner_process.h"

namespace distribute::internal {

template <class T>
class ParentOnly {
 public:
  explicit ParentOnly(std::unique_ptr<T> object) : object_(std::move(object)) {}
  ~ParentOnly() {
    if (owner_.forked_child()) (void)object_.release();
  }
  ParentOnly(const ParentOnly&) = delete;
  ParentOnly& operator=(const ParentOnly&) = delete;

  // The object; in a forked child, FailedPreconditionError naming `what`.
  T& get(const char* what) const {
    if (owner_.forked_child()) {
      throw FailedPreconditionError(std::string(what) +
                                    ": expected to be used in the process that created it, got a child forked from "
                                    "that process without exec (its threads exist only in the parent); create it "
                                    "after the fork");
    }
    return *object_;
  }

  // True in a child forked from the process that built it.
  bool forked_child() const noexcept { return owner_.forked_child(); }

 private:
  OwnerProcess owner_;
  std::unique_ptr<T> object_;
};

}  // namespace distribute::internal
