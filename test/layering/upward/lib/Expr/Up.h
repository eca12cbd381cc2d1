// A fixture for include_layering_catches_upward: lib/Expr reaching up to
// lib/Program through a relative path, which the checker must resolve.
#pragma once
#include "../Program/Tape.h"
