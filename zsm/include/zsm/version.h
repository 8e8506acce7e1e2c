/*
 * zsm's version, for C and C++: the one place it is written. CMakeLists.txt reads it from here
 * (project(VERSION)), and so do the shared library's soname and the pkg-config files.
 * ZSM_VERSION orders releases: (major * 10000 + minor * 100 + patch).
 */
#ifndef ZSM_VERSION_H
#define ZSM_VERSION_H

#define ZSM_VERSION_MAJOR 0
#define ZSM_VERSION_MINOR 1
#define ZSM_VERSION_PATCH 0
#define ZSM_VERSION (ZSM_VERSION_MAJOR * 10000 + ZSM_VERSION_MINOR * 100 + ZSM_VERSION_PATCH)
#define ZSM_VERSION_STRING "0.1.0"

#endif /* ZSM_VERSION_H */
