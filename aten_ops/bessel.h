#pragma once
// torch.special's Bessel family beyond i0/i1 (special_math.h): the Bessel functions j0, j1, y0, y1, the modified
// ones i0, i1, k0, k1 and the scaled k0, k1, the spherical j0 and the Airy function Ai, as UOp expressions. Each
// follows torch's CPU kernel (aten/src/ATen/native/Math.h, Cephes' rational fits and Chebyshev expansions) branch
// for branch and in its order of operations, its branches as selects, so values agree to rounding. Their
// coefficients are Cephes' (3-clause BSD licence); polynomial() and chebyshev() evaluate them as Cephes' polevl
// and chbevl do.

#include <cmath>

#include "aten_ops/special_math.h"

namespace tiny::aten_ops::special {

// ---- Bessel functions of the first and second kind: a rational fit in x^2 up to 5, then the asymptotic
// amplitude and phase fits in 25 / x^2 ----

inline constexpr double kJ0PP[] = {
    +7.96936729297347051624e-04, +8.28352392107440799803e-02, +1.23953371646414299388e+00, +5.44725003058768775090e+00,
    +8.74716500199817011941e+00, +5.30324038235394892183e+00, +9.99999999999999997821e-01};
inline constexpr double kJ0PQ[] = {
    +9.24408810558863637013e-04, +8.56288474354474431428e-02, +1.25352743901058953537e+00, +5.47097740330417105182e+00,
    +8.76190883237069594232e+00, +5.30605288235394617618e+00, +1.00000000000000000218e+00};
inline constexpr double kJ0QP[] = {
    -1.13663838898469149931e-02, -1.28252718670509318512e+00, -1.95539544257735972385e+01, -9.32060152123768231369e+01,
    -1.77681167980488050595e+02, -1.47077505154951170175e+02, -5.14105326766599330220e+01, -6.05014350600728481186e+00};
inline constexpr double kJ0QQ[] = {
    +6.43178256118178023184e+01, +8.56430025976980587198e+02, +3.88240183605401609683e+03, +7.24046774195652478189e+03,
    +5.93072701187316984827e+03, +2.06209331660327847417e+03, +2.42005740240291393179e+02};
inline constexpr double kJ0RP[] = {-4.79443220978201773821e+09, +1.95617491946556577543e+12,
                                   -2.49248344360967716204e+14, +9.70862251047306323952e+15};
inline constexpr double kJ0RQ[] = {
    +4.99563147152651017219e+02, +1.73785401676374683123e+05, +4.84409658339962045305e+07, +1.11855537045356834862e+10,
    +2.11277520115489217587e+12, +3.10518229857422583814e+14, +3.18121955943204943306e+16, +1.71086294081043136091e+18};
inline constexpr double kY0YP[] = {
    +1.55924367855235737965e+04, -1.46639295903971606143e+07, +5.43526477051876500413e+09, -9.82136065717911466409e+11,
    +8.75906394395366999549e+13, -3.46628303384729719441e+15, +4.42733268572569800351e+16, -1.84950800436986690637e+16};
inline constexpr double kY0YQ[] = {
    +1.04128353664259848412e+03, +6.26107330137134956842e+05, +2.68919633393814121987e+08, +8.64002487103935000337e+10,
    +2.02979612750105546709e+13, +3.17157752842975028269e+15, +2.50596256172653059228e+17};
inline constexpr double kJ1PP[] = {
    +7.62125616208173112003e-04, +7.31397056940917570436e-02, +1.12719608129684925192e+00, +5.11207951146807644818e+00,
    +8.42404590141772420927e+00, +5.21451598682361504063e+00, +1.00000000000000000254e+00};
inline constexpr double kJ1PQ[] = {
    +5.71323128072548699714e-04, +6.88455908754495404082e-02, +1.10514232634061696926e+00, +5.07386386128601488557e+00,
    +8.39985554327604159757e+00, +5.20982848682361821619e+00, +9.99999999999999997461e-01};
inline constexpr double kJ1QP[] = {
    +5.10862594750176621635e-02, +4.98213872951233449420e+00, +7.58238284132545283818e+01, +3.66779609360150777800e+02,
    +7.10856304998926107277e+02, +5.97489612400613639965e+02, +2.11688757100572135698e+02, +2.52070205858023719784e+01};
inline constexpr double kJ1QQ[] = {
    +7.42373277035675149943e+01, +1.05644886038262816351e+03, +4.98641058337653607651e+03, +9.56231892404756170795e+03,
    +7.99704160447350683650e+03, +2.82619278517639096600e+03, +3.36093607810698293419e+02};
inline constexpr double kJ1RP[] = {-8.99971225705559398224e+08, +4.52228297998194034323e+11,
                                   -7.27494245221818276015e+13, +3.68295732863852883286e+15};
inline constexpr double kJ1RQ[] = {
    +6.20836478118054335476e+02, +2.56987256757748830383e+05, +8.35146791431949253037e+07, +2.21511595479792499675e+10,
    +4.74914122079991414898e+12, +7.84369607876235854894e+14, +8.95222336184627338078e+16, +5.32278620332680085395e+18};
inline constexpr double kY1YP[] = {+1.26320474790178026440e+09, -6.47355876379160291031e+11,
                                   +1.14509511541823727583e+14, -8.12770255501325109621e+15,
                                   +2.02439475713594898196e+17, -7.78877196265950026825e+17};
inline constexpr double kY1YQ[] = {
    +5.94301592346128195359e+02, +2.35564092943068577943e+05, +7.34811944459721705660e+07, +1.87601316108706159478e+10,
    +3.88231277496238566008e+12, +6.20557727146953693363e+14, +6.87141087355300489866e+16, +3.97270608116560655612e+18};

inline constexpr double kTwoOverPi = 0.636619772367581343075535053490057448;
inline constexpr double kSqrtTwoOverPi = 0.797884560802865355879892119868763737;

// The asymptotic form beyond 5 of j (sine = false) or y (sine = true) of order 0 (phase pi / 4) or 1 (3 pi / 4):
// (P cos(x - phase) - 5 / x Q sin(x - phase)) sqrt(2 / pi) / sqrt(x), the sine and cosine swapped for y. Order 1
// takes its square 5 / x * (5 / x) as the CPU does.
inline UOpPtr bessel_asymptotic(const UOpPtr& x, int order, bool second_kind) {
  UOpPtr w = order == 0 ? div(k(x, 25), mul(x, x)) : mul(div(k(x, 5), x), div(k(x, 5), x));
  UOpPtr p = div(polynomial(w, order == 0 ? std::span<const double>(kJ0PP) : kJ1PP),
                 polynomial(w, order == 0 ? std::span<const double>(kJ0PQ) : kJ1PQ));
  UOpPtr q = mul(div(k(x, 5), x), div(polynomial(w, order == 0 ? std::span<const double>(kJ0QP) : kJ1QP),
                                      polynomial(w, order == 0 ? std::span<const double>(kJ0QQ) : kJ1QQ)));
  UOpPtr phase =
      sub(x, k(x, order == 0 ? 0.785398163397448309615660845819875721 : 2.356194490192344928846982537459627163));
  UOpPtr s = un(Ops::SIN, phase), c = un(Ops::COS, phase);
  UOpPtr v = second_kind ? add(mul(p, s), mul(q, c)) : sub(mul(p, c), mul(q, s));
  return div(mul(v, k(x, kSqrtTwoOverPi)), un(Ops::SQRT, x));
}

// j0: even; 1 - x^2 / 4 below 1e-5, else (x^2 - r1)(x^2 - r2) R(x^2) with r1, r2 its first two zeros squared.
inline UOpPtr bessel_j0(const UOpPtr& x0) {
  UOpPtr x = un(Ops::ABS, x0), xx = mul(x, x);
  UOpPtr tiny = sub(k(x, 1), div(xx, k(x, 4)));
  UOpPtr small = div(mul(mul(sub(xx, k(x, 5.78318596294678452118e+00)), sub(xx, k(x, 3.04712623436620863991e+01))),
                         polynomial(xx, kJ0RP)),
                     polynomial(xx, kJ0RQ));
  return where(le(x, k(x, 5)), where(lt(x, k(x, 0.00001)), tiny, small), bessel_asymptotic(x, 0, false));
}

// j1: odd; R(x^2) x (x^2 - r1)(x^2 - r2) up to 5.
inline UOpPtr bessel_j1(const UOpPtr& x0) {
  UOpPtr x = un(Ops::ABS, x0), xx = mul(x, x);
  UOpPtr small =
      mul(mul(mul(div(polynomial(xx, kJ1RP), polynomial(xx, kJ1RQ)), x), sub(xx, k(x, 1.46819706421238932572e+01))),
          sub(xx, k(x, 4.92184563216946036703e+01)));
  UOpPtr v = where(le(x, k(x, 5)), small, bessel_asymptotic(x, 1, false));
  return where(lt(x0, k(x0, 0)), neg(v), v); // -0 keeps its sign through the product
}

// y0: -inf at 0, NaN below; up to 5 Y(x^2) + 2 / pi log(x) j0(x).
inline UOpPtr bessel_y0(const UOpPtr& x) {
  UOpPtr xx = mul(x, x);
  UOpPtr small =
      add(div(polynomial(xx, kY0YP), polynomial(xx, kY0YQ)), mul(mul(k(x, kTwoOverPi), un(Ops::LOG, x)), bessel_j0(x)));
  small = where(lt(x, k(x, 0)), k(x, NAN), small);
  small = where(eq(x, k(x, 0)), k(x, -INFINITY), small);
  return where(le(x, k(x, 5)), small, bessel_asymptotic(x, 0, true));
}

// y1: -inf at 0, NaN below; up to 5 x Y(x^2) + 2 / pi (j1(x) log(x) - 1 / x).
inline UOpPtr bessel_y1(const UOpPtr& x) {
  UOpPtr xx = mul(x, x);
  UOpPtr small = add(mul(x, div(polynomial(xx, kY1YP), polynomial(xx, kY1YQ))),
                     mul(k(x, kTwoOverPi), sub(mul(bessel_j1(x), un(Ops::LOG, x)), un(Ops::RECIP, x))));
  small = where(lt(x, k(x, 0)), k(x, NAN), small);
  small = where(eq(x, k(x, 0)), k(x, -INFINITY), small);
  return where(le(x, k(x, 5)), small, bessel_asymptotic(x, 1, true));
}

// ---- modified Bessel functions ----

// torch.special.modified_bessel_i1: as i1 (special_math.h) but with every term of the series in float too, and
// the CPU's order of the products.
inline UOpPtr modified_bessel_i1(const UOpPtr& x0) {
  UOpPtr x = un(Ops::ABS, x0);
  UOpPtr small = mul(mul(chebyshev(sub(div(x, k(x, 2)), k(x, 2)), kI1eSmall), x), exp(x));
  UOpPtr large = div(mul(exp(x), chebyshev(sub(div(k(x, 32), x), k(x, 2)), kI1eLarge)), un(Ops::SQRT, x));
  UOpPtr v = where(le(x, k(x, 8)), small, large);
  return where(lt(x0, k(x0, 0)), neg(v), v);
}

inline constexpr double kK0Small[] = {
    +1.37446543561352307156e-16, +4.25981614279661018399e-14, +1.03496952576338420167e-11, +1.90451637722020886025e-09,
    +2.53479107902614945675e-07, +2.28621210311945178607e-05, +1.26461541144692592338e-03, +3.59799365153615016266e-02,
    +3.44289899924628486886e-01, -5.35327393233902768720e-01};
inline constexpr double kK0Large[] = {
    +5.30043377268626276149e-18, -1.64758043015242134646e-17, +5.21039150503902756861e-17, -1.67823109680541210385e-16,
    +5.51205597852431940784e-16, -1.84859337734377901440e-15, +6.34007647740507060557e-15, -2.22751332699166985548e-14,
    +8.03289077536357521100e-14, -2.98009692317273043925e-13, +1.14034058820847496303e-12, -4.51459788337394416547e-12,
    +1.85594911495471785253e-11, -7.95748924447710747776e-11, +3.57739728140030116597e-10, -1.69753450938905987466e-09,
    +8.57403401741422608519e-09, -4.66048989768794782956e-08, +2.76681363944501510342e-07, -1.83175552271911948767e-06,
    +1.39498137188764993662e-05, -1.28495495816278026384e-04, +1.56988388573005337491e-03, -3.14481013119645005427e-02,
    +2.44030308206595545468e+00};
inline constexpr double kK1Small[] = {
    -7.02386347938628759343e-18, -2.42744985051936593393e-15, -6.66690169419932900609e-13, -1.41148839263352776110e-10,
    -2.21338763073472585583e-08, -2.43340614156596823496e-06, -1.73028895751305206302e-04, -6.97572385963986435018e-03,
    -1.22611180822657148235e-01, -3.53155960776544875667e-01, +1.52530022733894777053e+00};
inline constexpr double kK1Large[] = {
    -5.75674448366501715755e-18, +1.79405087314755922667e-17, -5.68946255844285935196e-17, +1.83809354436663880070e-16,
    -6.05704724837331885336e-16, +2.03870316562433424052e-15, -7.01983709041831346144e-15, +2.47715442448130437068e-14,
    -8.97670518232499435011e-14, +3.34841966607842919884e-13, -1.28917396095102890680e-12, +5.13963967348173025100e-12,
    -2.12996783842756842877e-11, +9.21831518760500529508e-11, -4.19035475934189648750e-10, +2.01504975519703286596e-09,
    -1.03457624656780970260e-08, +5.74108412545004946722e-08, -3.50196060308781257119e-07, +2.40648494783721712015e-06,
    -1.93619797416608296024e-05, +1.95215518471351631108e-04, -2.85781685962277938680e-03, +1.03923736576817238437e-01,
    +2.72062619048444266945e+00};

// k0 (order 0) and k1, scaled by exp(x) or not: inf at 0, NaN below 0. Up to 2 a Chebyshev series in x^2 - 2
// with the log(x / 2) i_n(x) term, beyond a series in 8 / x - 2 times exp(-x) / sqrt(x).
inline UOpPtr bessel_k(const UOpPtr& x, int order, bool scaled) {
  UOpPtr half_x = mul(k(x, 0.5), x);
  UOpPtr series = chebyshev(sub(mul(x, x), k(x, 2)), order == 0 ? std::span<const double>(kK0Small) : kK1Small);
  UOpPtr small = order == 0 ? sub(series, mul(un(Ops::LOG, half_x), bessel_i0(x, false)))
                            : add(mul(un(Ops::LOG, half_x), modified_bessel_i1(x)), div(series, x));
  UOpPtr tail = chebyshev(sub(div(k(x, 8), x), k(x, 2)), order == 0 ? std::span<const double>(kK0Large) : kK1Large);
  UOpPtr large = div(scaled ? tail : mul(exp(neg(x)), tail), un(Ops::SQRT, x));
  if (scaled) small = mul(small, exp(x));
  UOpPtr v = where(le(x, k(x, 2)), small, large);
  v = where(lt(x, k(x, 0)), k(x, NAN), v);
  return where(eq(x, k(x, 0)), k(x, INFINITY), v);
}

// The spherical Bessel function j0(x) = sin(x) / x: its Taylor series below 0.5, 0 at +-inf.
inline UOpPtr spherical_bessel_j0(const UOpPtr& x) {
  static constexpr double kTaylor[] = {
      1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0, 1.0};
  UOpPtr v = where(lt(un(Ops::ABS, x), k(x, 0.5)), polynomial(mul(x, x), kTaylor), div(un(Ops::SIN, x), x));
  return where(eq(un(Ops::ABS, x), k(x, INFINITY)), k(x, 0), v);
}

// ---- the Airy function Ai ----

inline constexpr double kAiryAN[] = {
    +3.46538101525629032477e-01, +1.20075952739645805542e+01, +7.62796053615234516538e+01, +1.68089224934630576269e+02,
    +1.59756391350164413639e+02, +7.05360906840444183113e+01, +1.40264691163389668864e+01, +9.99999999999999995305e-01};
inline constexpr double kAiryAD[] = {
    +5.67594532638770212846e-01, +1.47562562584847203173e+01, +8.45138970141474626562e+01, +1.77318088145400459522e+02,
    +1.64234692871529701831e+02, +7.14778400825575695274e+01, +1.40959135607834029598e+01, +1.00000000000000000470e+00};
inline constexpr double kAiryAFN[] = {
    -1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
    -2.79779981545119124951e-01, -4.91900132609500318020e-02, -4.06265923594885404393e-03,
    -1.59276496239262096340e-04, -2.77649108155232920844e-06, -1.67787698489114633780e-08};
inline constexpr double kAiryAFD[] = {
    +1.33560420706553243746e+01, +3.26825032795224613948e+01, +2.67367040941499554804e+01,
    +9.18707402907259625840e+00, +1.47529146771666414581e+00, +1.15687173795188044134e-01,
    +4.40291641615211203805e-03, +7.54720348287414296618e-05, +4.51850092970580378464e-07};
inline constexpr double kAiryAGN[] = {
    +1.97339932091685679179e-02, +3.91103029615688277255e-01, +1.06579897599595591108e+00, +9.39169229816650230044e-01,
    +3.51465656105547619242e-01, +6.33888919628925490927e-02, +5.85804113048388458567e-03, +2.82851600836737019778e-04,
    +6.98793669997260967291e-06, +8.11789239554389293311e-08, +3.41551784765923618484e-10};
inline constexpr double kAiryAGD[] = {
    +9.30892908077441974853e+00, +1.98352928718312140417e+01, +1.55646628932864612953e+01, +5.47686069422975497931e+00,
    +9.54293611618961883998e-01, +8.64580826352392193095e-02, +4.12656523824222607191e-03, +1.01259085116509135510e-04,
    +1.17166733214413521882e-06, +4.91834570062930015649e-09};

// The Maclaurin series Ai(x) = c1 f(x) - c2 g(x) used for -2.09 <= x < 2.09, summed while a term of f changes f
// by more than epsilon. That takes at most 10 steps in float and 14 in double on a fine grid of the interval; the
// bound leaves room for x next to f's zero near -1.986, where f is tiny (steps after the CPU's last are masked).
inline UOpPtr airy_series(const UOpPtr& x) {
  const bool wide = x->dtype == DType::Float64;
  const int steps = wide ? 19 : 12;
  const double epsilon = wide ? 2.220446049250313e-16 : 1.1920928955078125e-07;
  UOpPtr f = k(x, 1), g = x, m = k(x, 1), n = x, z = mul(mul(x, x), x);
  UOpPtr done = lt(k(x, 1), k(x, 0)); // false
  double kk = 1;
  for (int i = 0; i < steps; i++) {
    UOpPtr live = un(Ops::NOT, done);
    UOpPtr m1 = div(div(mul(m, z), k(x, kk + 1)), k(x, kk + 2));
    UOpPtr n1 = div(div(mul(n, z), k(x, kk + 2)), k(x, kk + 3));
    kk += 3;
    m = where(live, m1, m);
    n = where(live, n1, n);
    f = where(live, add(f, m1), f);
    g = where(live, add(g, n1), g);
    // the loop goes on while |m / f| > epsilon (NaN stops it)
    done = either(done, both(live, un(Ops::NOT, lt(k(x, epsilon), un(Ops::ABS, div(m1, f))))));
  }
  return sub(mul(k(x, 0.355028053887817239260), f), mul(k(x, 0.258819403792806798405), g));
}

// Ai(x): NaN at +-inf, 0 beyond 103.892; below -2.09 the oscillating asymptotic form, from 2.09 the decaying one
// in 1 / zeta with zeta = 2 x^(3/2) / 3, between the series.
inline UOpPtr airy_ai(const UOpPtr& x) {
  constexpr double kInvSqrtPi = 5.64189583547756286948e-01;
  UOpPtr minus_x = neg(x), root = un(Ops::SQRT, minus_x);
  UOpPtr zeta_neg = div(mul(mul(k(x, -2), x), root), k(x, 3));
  UOpPtr z = un(Ops::RECIP, zeta_neg), zz = mul(z, z);
  UOpPtr t = add(zeta_neg, k(x, 0.25 * M_PI));
  UOpPtr oscillating =
      mul(div(k(x, kInvSqrtPi), un(Ops::SQRT, root)),
          sub(mul(un(Ops::SIN, t), add(k(x, 1), div(mul(zz, polynomial(zz, kAiryAFN)), polynomial(zz, kAiryAFD)))),
              mul(un(Ops::COS, t), div(mul(z, polynomial(zz, kAiryAGN)), polynomial(zz, kAiryAGD)))));
  UOpPtr zeta = div(mul(mul(k(x, 2), x), un(Ops::SQRT, x)), k(x, 3));
  UOpPtr w = un(Ops::RECIP, zeta);
  UOpPtr decaying = div(mul(k(x, kInvSqrtPi), div(polynomial(w, kAiryAN), polynomial(w, kAiryAD))),
                        mul(mul(k(x, 2), un(Ops::SQRT, un(Ops::SQRT, x))), exp(zeta)));
  UOpPtr v = where(lt(x, k(x, -2.09)), oscillating, where(le(k(x, 2.09), x), decaying, airy_series(x)));
  v = where(lt(k(x, 103.892), x), k(x, 0), v);
  return where(eq(un(Ops::ABS, x), k(x, INFINITY)), k(x, NAN), v);
}

} // namespace tiny::aten_ops::special
