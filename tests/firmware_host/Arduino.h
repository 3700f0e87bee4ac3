// Host stand-in for the Arduino core: just enough to compile and run car_controller.ino on a PC
// (tests/test_car_firmware.py). Time is simulated; Serial is a byte queue; outputs are logged.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>

#define INPUT_PULLUP 2
#define RISING 3
#define A0 14
#define constrain(x, lo, hi) ((x) < (lo) ? (lo) : ((x) > (hi) ? (hi) : (x)))

extern uint32_t host_millis;
inline uint32_t millis() { return host_millis; }
inline void pinMode(int, int) {}
inline int digitalRead(int) { return 0; }
inline int digitalPinToInterrupt(int pin) { return pin == 2 ? 0 : -1; }
inline void attachInterrupt(int, void (*)(), int) {}
inline void noInterrupts() {}
inline void interrupts() {}
inline int analogRead(int) { return 340; }   // 340 counts * 22 mV = 7.48 V

struct HostSerial {
  std::deque<uint8_t> rx;
  void begin(long) {}
  int available() { return (int)rx.size(); }
  int read() { if (rx.empty()) return -1; int b = rx.front(); rx.pop_front(); return b; }
  size_t write(const uint8_t *buf, size_t n) {
    std::printf("TX %u ", (unsigned)host_millis);
    for (size_t i = 0; i < n; i++) std::printf("%02x", buf[i]);
    std::printf("\n");
    return n;
  }
};
extern HostSerial Serial;
