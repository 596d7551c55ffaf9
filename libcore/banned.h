/* banned.h - functions that are too easy to misuse; calling one fails the build.
 *
 * strcpy/strcat/sprintf overflow silently, strtok keeps hidden state, atoi/atof
 * cannot report bad input. Use snprintf, memcpy with a checked length, strtok_r,
 * and capy_parse_* (util/parse.h) instead.
 */
#ifndef CAPY_BANNED_H
#define CAPY_BANNED_H

#define CAPY_BANNED(func) sorry_##func##_is_a_banned_function

#undef strcpy
#define strcpy(x, y) CAPY_BANNED(strcpy)
#undef strcat
#define strcat(x, y) CAPY_BANNED(strcat)
#undef strncpy
#define strncpy(x, y, n) CAPY_BANNED(strncpy)
#undef sprintf
#define sprintf(...) CAPY_BANNED(sprintf)
#undef vsprintf
#define vsprintf(...) CAPY_BANNED(vsprintf)
#undef strtok
#define strtok(x, y) CAPY_BANNED(strtok)
#undef atoi
#define atoi(x) CAPY_BANNED(atoi)
#undef atol
#define atol(x) CAPY_BANNED(atol)
#undef atof
#define atof(x) CAPY_BANNED(atof)
#undef gets
#define gets(x) CAPY_BANNED(gets)

#endif
