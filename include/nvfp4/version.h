/* libNVFP4 — compile-time version.
 *
 * NVFP4_VERSION_* follow semantic versioning of the release.
 * NVFP4_ABI_VERSION is the major version of the binary interface: it is the
 * SONAME suffix (libNVFP4.so.<abi>) and what Q4_abi_version() returns. It
 * changes only when a shipped symbol or struct layout changes incompatibly,
 * which this project does not do (new behaviour gets new `_v2` symbols).
 */
#ifndef NVFP4_VERSION_H_
#define NVFP4_VERSION_H_

#define NVFP4_VERSION_MAJOR 0
#define NVFP4_VERSION_MINOR 1
#define NVFP4_VERSION_PATCH 0
#define NVFP4_VERSION_STRING "0.1.0"

#define NVFP4_ABI_VERSION 1

/* Single number for preprocessor comparisons: MAJOR*10000 + MINOR*100 + PATCH. */
#define NVFP4_VERSION_NUMBER (NVFP4_VERSION_MAJOR * 10000 + NVFP4_VERSION_MINOR * 100 + NVFP4_VERSION_PATCH)

#endif /* NVFP4_VERSION_H_ */
