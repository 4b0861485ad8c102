/* base/pause.h — RF__PAUSE(): the CPU's spin-wait hint (x86 pause, Arm yield) for every spinning wait. */
#ifndef RF_BASE_PAUSE_H
#define RF_BASE_PAUSE_H

#if defined(__x86_64__) || defined(__i386__)
#define RF__PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define RF__PAUSE() __asm__ __volatile__("yield")
#else
#define RF__PAUSE() ((void)0)
#endif

#endif
