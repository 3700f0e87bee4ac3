// Runs car_controller.ino against simulated time. stdin: lines "<t_ms> <hex bytes>" (host frames,
// delivered at t_ms); argv[1]: end time in ms. stdout: "TX t hex" and "PWM t pin us" lines.
#include "Arduino.h"
#include "Servo.h"
#include "Wire.h"
uint32_t host_millis = 0;
HostSerial Serial;
TwoWire Wire;
#include "car_controller.ino"
#include <cstdlib>
#include <vector>
#include <string>
#include <iostream>

int main(int argc, char **argv) {
  uint32_t end_ms = argc > 1 ? (uint32_t)atol(argv[1]) : 1000;
  std::vector<std::pair<uint32_t, std::string>> script;
  uint32_t t; std::string hex;
  while (std::cin >> t >> hex) script.push_back({t, hex});
  size_t next = 0;
  setup();
  for (host_millis = 0; host_millis <= end_ms; host_millis++) {
    while (next < script.size() && script[next].first <= host_millis) {
      const std::string &h = script[next].second;
      for (size_t i = 0; i + 1 < h.size(); i += 2) Serial.rx.push_back((uint8_t)strtol(h.substr(i, 2).c_str(), 0, 16));
      next++;
    }
    loop();
  }
  return 0;
}
