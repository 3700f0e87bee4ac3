#pragma once
#include "Arduino.h"
class Servo {
 public:
  void attach(int pin) { pin_ = pin; }
  void writeMicroseconds(int us) {
    if (us != last_) std::printf("PWM %u %d %d\n", (unsigned)host_millis, pin_, us);
    last_ = us;
  }
 private:
  int pin_ = -1, last_ = -1;
};
