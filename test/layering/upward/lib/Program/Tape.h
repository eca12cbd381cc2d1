// A fixture for include_layering_catches_upward (nothing to compile).
#pragma once
