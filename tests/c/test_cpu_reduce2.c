/* test_cpu_reduce2.c — known-value tests for the reduce2 family of the CPU
 * reference backend (replayer/cpu/cpu_reduce2*.c): amax/amin, argmax/argmin,
 * max.dim/min.dim, var/std, linalg_vector_norm, any/all, prod, cumsum,
 * softmax/log_softmax (+ backwards), native_layer_norm (+ backward) and
 * nll_loss (+ backward), with strided/transposed inputs, in-place runs,
 * zero-size tensors, several dtypes, absent optional inputs/outputs and the
 * error paths. Expected values are PyTorch 2.13 CPU results (pasted below).
 *
 * Build: make build/tests/test_cpu_reduce2 && build/tests/test_cpu_reduce2 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_families.h"
#include "op/half.h"
#include "check_cpu.h"

/* The family of op per ops.def (the generated dispatch reads the same column). */
static bool family_owns(int op)
{
    return op >= 0 && op < RGPU_OP_COUNT && rgpu_op_table[op].family == RGPU_OPFAM_REDUCE2;
}

/* ---------------------------------------------------------------------------
 * Reference values (torch 2.13 CPU). X24 is the (2,3,4) f32 input most cases
 * use, XT its transpose(0,2); Xn is X24 with NaN at [0,1,2] and [1,2,0]. */
static const double X24[24] = {0.5, -1.25, 3, 3, 2, -0.75, 0.125, -4, 1.5, 1.5, -2.5, 0, -3.5, 2.25, 0.75, -1, 4.5, -0.5, 1, 2.75, -2, 0.25, 3.25, -1.5};
static const double AMAX_02K[3] = {3, 4.5, 3.25};
static const double AMIN_1[8] = {0.5, -1.25, -2.5, -4, -3.5, -0.5, 0.75, -1.5};
static const double AMAX_ALL[1] = {4.5};
static const double AMAX_T_2[12] = {0.5, 4.5, 1.5, 2.25, -0.5, 1.5, 3, 1, 3.25, 3, 2.75, 0};
static const double AMAX_N_2[6] = {3, NAN, 1.5, 2.25, 4.5, NAN};
static const double AMIN_N_1[8] = {0.5, -1.25, NAN, -4, NAN, -0.5, 0.75, -1.5};
static const double AMAX_I_1[2] = {9, 5};
static const double AMIN_I_0[4] = {-2, -7, 5, 0};
static const double ARGMAX_2[6] = {2, 0, 0, 1, 0, 2};
static const double ARGMIN_1K[8] = {0, 0, 2, 1, 0, 1, 0, 2};
static const double ARGMAX_ALL[1] = {16};
static const double ARGMIN_ALL[1] = {7};
static const double ARGMAX_N_2[6] = {2, 2, 0, 1, 0, 0};
static const double ARGMIN_N_2[6] = {1, 2, 2, 0, 1, 0};
static const double ARGMAX_T_0[6] = {2, 1, 0, 0, 0, 2};
static const double ARGMAX_I_1[2] = {2, 2};
static const double ARGMIN_I_1[2] = {1, 0};
static const double MAX1_V[8] = {2, 1.5, 3, 3, 4.5, 2.25, 3.25, 2.75};
static const double MAX1_I[8] = {1, 2, 0, 0, 1, 0, 2, 1};
static const double MINN2_V[6] = {-1.25, NAN, -2.5, -3.5, -0.5, NAN};
static const double MINN2_I[6] = {1, 2, 2, 0, 1, 0};
static const double VAR_2[6] = {4.3072915077209473, 6.28515625, 3.5625, 6.1041665077209473, 4.6822915077209473, 5.625};
static const double STD_01K[4] = {2.880972146987915, 1.3693064451217651, 2.1031968593597412, 2.6727795600891113};
static const double VAR_ALL_C0[1] = {4.6787924766540527};
static const double STD_T_1_C2[8] = {1.0801234245300293, 6.0138726234436035, 2.0716338157653809, 2.0103895664215088, 3.8904263973236084, 1.9472202062606812, 4.9665546417236328, 3.2850673198699951};
static const double VAR_H_2[6] = {4.30859375, 6.28515625, 3.5625, 6.10546875, 4.68359375, 5.625};
static const double NORM_2_2[6] = {4.4511232376098633, 4.5363116264343262, 3.2787191867828369, 4.3445367813110352, 5.3909645080566406, 4.1079192161560059};
static const double NORM_1_2[6] = {7.75, 6.875, 5.5, 7.5, 8.75, 7};
static const double NORM_INF_2[6] = {3, 4, 2.5, 3.5, 4.5, 3.25};
static const double NORM_NINF_2[6] = {0.5, 0.125, 0, 0.75, 0.5, 0.25};
static const double NORM_0_2[6] = {4, 4, 3, 4, 4, 4};
static const double NORM_3_2[6] = {3.8276407718658447, 4.1683149337768555, 2.8178703784942627, 3.818732738494873, 4.8352565765380859, 3.575730562210083};
static const double NORM_P5_2[6] = {27.976083755493164, 21.472026824951172, 16.245967864990234, 27.424640655517578, 30.104310989379883, 24.420732498168945};
static const double NORM_M1_2[6] = {0.28846156597137451, 0.099173553287982941, 0, 0.32642486691474915, 0.27887323498725891, 0.18266978859901428};
static const double NORM_2_ALL[1] = {10.768153190612793};
static const double NORM_INF_N_2[6] = {3, NAN, 2.5, 3.5, 4.5, NAN};
static const double NORM_2_T_01_D[2] = {7.1512673701939011, 8.0506210940523086};
static const double ANY_1[3] = {1, 0, 1};
static const double ALL_1[3] = {0, 0, 1};
static const double ALL_0[3] = {0, 0, 0};
static const double ANY_U_ALL[1] = {1};
static const double ALL_U_1[2] = {0, 0};
static const double PROD_I_1[2] = {-24, -5};
static const double PROD_F_02[6] = {-5.625, 0.75, -0, 5.90625, -6.1875, 2.4375};
static const double PROD_ALL[1] = {-0};
static const double CUMSUM_2[24] = {0.5, -0.75, 2.25, 5.25, 2, 1.25, 1.375, -2.625, 1.5, 3, 0.5, 0.5, -3.5, -1.25, -0.5, -1.5, 4.5, 4, 5, 7.75, -2, -1.75, 1.5, 0};
static const double CUMSUM_T_0[24] = {0.5, -3.5, 2, 4.5, 1.5, -2, -0.75, -1.25, 1.25, 4, 3, -1.75, 2.25, -0.5, 1.375, 5, 0.5, 1.5, 5.25, -1.5, -2.625, 7.75, 0.5, 0};
static const double CUMSUM_I[8] = {3, -4, 5, 14, -2, -4, 1, 1};
static const double CUMSUM_BF_1[24] = {0.5, -1.25, 3, 3, 2.5, -2, 3.125, -1, 4, -0.5, 0.625, -1, -3.5, 2.25, 0.75, -1, 1, 1.75, 1.75, 1.75, -1, 2, 5, 0.25};
static const double CUMSUM_F64_1[24] = {0.5, -1.25, 3, 3, 2.5, -2, 3.125, -1, 4, -0.5, 0.625, -1, -3.5, 2.25, 0.75, -1, 1, 1.75, 1.75, 1.75, -1, 2, 5, 0.25};
static const double SM_2[24] = {0.039156164973974228, 0.0068043209612369537, 0.47701975703239441, 0.47701975703239441, 0.81983232498168945, 0.052410125732421875, 0.12572535872459412, 0.0020321612246334553, 0.44614061713218689, 0.44614061713218689, 0.0081713506951928139, 0.099547430872917175, 0.0025158589705824852, 0.79045939445495605, 0.17637532949447632, 0.030649436637759209, 0.82596206665039062, 0.0055652884766459465, 0.024941893294453621, 0.14353068172931671, 0.0049333320930600166, 0.046806152909994125, 0.94012671709060669, 0.0081336898729205132};
static const double LSM_2[24] = {-3.2401974201202393, -4.9901971817016602, -0.74019736051559448, -0.74019736051559448, -0.19865544140338898, -2.948655366897583, -2.073655366897583, -6.1986556053161621, -0.80712109804153442, -0.80712109804153442, -4.8071212768554688, -2.3071210384368896, -5.9851408004760742, -0.23514099419116974, -1.7351410388946533, -3.4851410388946533, -0.19120641052722931, -5.1912064552307129, -3.6912064552307129, -1.9412064552307129, -5.3117403984069824, -3.0617406368255615, -0.061740584671497345, -4.8117403984069824};
static const double SM_0[24] = {0.9820137619972229, 0.02931223064661026, 0.90465050935745239, 0.9820137619972229, 0.075858175754547119, 0.43782350420951843, 0.29421496391296387, 0.0011695101857185364, 0.97068774700164795, 0.77729988098144531, 0.0031726828310638666, 0.81757444143295288, 0.017986210063099861, 0.97068774700164795, 0.09534946084022522, 0.017986210063099861, 0.92414182424545288, 0.56217652559280396, 0.70578503608703613, 0.99883049726486206, 0.02931223064661026, 0.22270014882087708, 0.99682730436325073, 0.18242551386356354};
static const double LSM_T_1[24] = {-2.104130744934082, -8.0018367767333984, -0.60413062572479248, -0.00183723377995193, -1.1041306257247925, -6.5018372535705566, -2.906428337097168, -0.18170738220214844, -2.406428337097168, -2.9317073822021484, -0.15642838180065155, -2.1817073822021484, -0.058743216097354889, -2.6718370914459229, -2.9337432384490967, -2.4218370914459229, -5.5587430000305176, -0.17183700203895569, -0.049455538392066956, -3.7870857715606689, -7.0494556427001953, -0.037085700780153275, -3.0494556427001953, -4.2870855331420898};
static const double SM_INF_2[24] = {NAN, NAN, NAN, NAN, 0.86517637968063354, 0, 0.13267910480499268, 0.0021445578895509243, 0.44614061713218689, 0.44614061713218689, 0.0081713506951928139, 0.099547430872917175, 0.0025158589705824852, 0.79045939445495605, 0.17637532949447632, 0.030649436637759209, 0.82596206665039062, 0.0055652884766459465, 0.024941893294453621, 0.14353068172931671, 0.0049333320930600166, 0.046806152909994125, 0.94012671709060669, 0.0081336898729205132};
static const double LSM_INF_2[24] = {NAN, NAN, NAN, NAN, -0.14482192695140839, -INFINITY, -2.0198218822479248, -6.1448221206665039, -0.80712109804153442, -0.80712109804153442, -4.8071212768554688, -2.3071210384368896, -5.9851408004760742, -0.23514099419116974, -1.7351410388946533, -3.4851410388946533, -0.19120641052722931, -5.1912064552307129, -3.6912064552307129, -1.9412064552307129, -5.3117403984069824, -3.0617406368255615, -0.061740584671497345, -4.8117403984069824};
static const double SM_H_2[24] = {0.039156164973974228, 0.0068043209612369537, 0.47701975703239441, 0.47701975703239441, 0.81983232498168945, 0.052410125732421875, 0.12572535872459412, 0.0020321612246334553, 0.44614061713218689, 0.44614061713218689, 0.0081713506951928139, 0.099547430872917175, 0.0025158589705824852, 0.79045939445495605, 0.17637532949447632, 0.030649436637759209, 0.82596206665039062, 0.0055652884766459465, 0.024941893294453621, 0.14353068172931671, 0.0049333320930600166, 0.046806152909994125, 0.94012671709060669, 0.0081336898729205132};
static const double SM_BF_1[24] = {0.12158203125, 0.0546875, 0.94140625, 0.953125, 0.546875, 0.09033203125, 0.05322265625, 0.000865936279296875, 0.330078125, 0.85546875, 0.0038604736328125, 0.04736328125, 0.000335693359375, 0.83203125, 0.06884765625, 0.022705078125, 1, 0.05322265625, 0.0888671875, 0.96484375, 0.00150299072265625, 0.11328125, 0.84375, 0.01373291015625};
static const double G24[24] = {-1.25, 0.5, -0.5, 1.25, 0.25, -0.75, 1, 0, -1, 0.75, -0.25, -1.25, 0.5, -0.5, 1.25, 0.25, -0.75, 1, 0, -1, 0.75, -0.25, -1.25, 0.5};
static const double SMB_2[24] = {-0.061170611530542374, 0.0012777033261954784, -0.3874458372592926, 0.4473387598991394, -0.0339212566614151, -0.054578639566898346, 0.08909202367067337, -0.00059212266933172941, -0.33995366096496582, 0.44079241156578064, -9.7955831733997911e-05, -0.10074077546596527, 0.0016751602524891496, -0.26413971185684204, 0.2497192919254303, 0.012745269574224949, 0.0061426227912306786, 0.0097806435078382492, 0.018891911953687668, -0.034815244376659393, 0.0095168566331267357, 0.043487273156642914, -0.066661447286605835, 0.013657222501933575};
static const double LSMB_2[24] = {-1.25, 0.5, -0.5, 1.25, -0.15991616249084473, -0.77620506286621094, 0.93713730573654175, -0.001016080379486084, -0.21925392746925354, 1.5307461023330688, -0.23570014536380768, -1.0757919549942017, 0.49622622132301331, -1.6856890916824341, 0.98543703556060791, 0.20402584969997406, -0.13052845001220703, 1.0041739940643311, 0.018706418573856354, -0.89235198497772217, 0.75123333930969238, -0.23829846084117889, -1.0149682760238647, 0.50203341245651245};
static const double SMB_1[24] = {-0.1100856140255928, -0.005528702400624752, -0.076152272522449493, 0.11377811431884766, 0.32645457983016968, -0.12178609520196915, 0.075500078499317169, -0.0009810994379222393, -0.21636897325515747, 0.1273147314786911, 0.00065218721283599734, -0.11279711872339249, 0.00041766470531001687, -0.09019799530506134, 0.15319779515266418, 0.027217783033847809, -0.002664672676473856, 0.074192754924297333, 0.085761852562427521, -0.047162406146526337, 0.0022470131516456604, 0.016005201265215874, -0.23895971477031708, 0.019944651052355766};
static const double W4[4] = {1.5, -0.5, 2, 0.25};
static const double B4[4] = {0.10000000149011612, 0.20000000298023224, -0.30000001192092896, 0};
static const double LN_Y[24] = {-0.57808041572570801, 0.91285371780395508, 1.577761173248291, 0.2347201406955719, 1.9351478815078735, 0.22158996760845184, 0.4196658730506897, -0.38502120971679688, 1.3617842197418213, -0.22059471905231476, -3.5118141174316406, -0.019117938354611397, -2.090770959854126, -0.41341584920883179, 0.75157004594802856, -0.073025695979595184, 2.1511368751525879, 0.8503604531288147, -1.3005545139312744, 0.10839341580867767, -1.3605917692184448, 0.13914200663566589, 2.8646156787872314, -0.18257397413253784};
static const double LN_M[6] = {1.3125, -0.65625005960464478, 0.12499997019767761, -0.375, 1.9375, 0};
static const double LN_R[6] = {0.55637365579605103, 0.46058613061904907, 0.61177414655685425, 0.46736446022987366, 0.53362911939620972, 0.48686394095420837};
static const double LN2_Y[24] = {0.11698952317237854, -0.73754256963729858, 1.337749719619751, 1.337749719619751, 0.849445641040802, -0.49339056015014648, -0.066124506294727325, -2.0803787708282471, 0.6052936315536499, 0.6052936315536499, -1.3479228019714355, -0.12716251611709595, -1.7752788066864014, 0.76346182823181152, 0.10118167102336884, -0.6714785099029541, 1.7568819522857666, -0.4507184624671936, 0.21156169474124908, 0.98422181606292725, -1.1129986047744751, -0.11957837641239166, 1.204981803894043, -0.89223861694335938};
static const double LN2_M[2] = {0.2604166567325592, 0.52083337306976318};
static const double LN2_R[2] = {0.48830407857894897, 0.441520094871521};
static const double LNT_Y[24] = {1.0998750925064087, -0.79987508058547974, -0.89968013763427734, 1.1996802091598511, 1.0998368263244629, -0.79983681440353394, -0.89983677864074707, 1.1998368501663208, -0.86945837736129761, 1.1694583892822266, 1.0987224578857422, -0.79872244596481323, 1.0996050834655762, -0.79960513114929199, -0.89739799499511719, 1.1973979473114014, -0.89993941783905029, 1.199939489364624, 1.0998750925064087, -0.79987508058547974, -0.89995604753494263, 1.1999560594558716, 1.0991122722625732, -0.79911231994628906};
static const double LNT_M[12] = {-1.5, 3.25, -0.25, 0.5, -0.625, 0.875, 1.875, 0.5625, 0.375, 1, -0.625, -0.75};
static const double LNT_R[12] = {0.49993753433227539, 0.7997441291809082, 0.5713353157043457, 0.5713353157043457, 7.7556672096252441, 1.5979559421539307, 0.88853788375854492, 2.2797667980194092, 0.34780502319335938, 0.49993753433227539, 0.29628327488899231, 1.3321497440338135};
static const double LNH_Y[24] = {-0.578125, 0.91259765625, 1.578125, 0.2347412109375, 1.935546875, 0.2215576171875, 0.419677734375, -0.385009765625, 1.361328125, -0.220703125, -3.51171875, -0.0191192626953125, -2.08984375, -0.41357421875, 0.75146484375, -0.072998046875, 2.150390625, 0.85009765625, -1.30078125, 0.1083984375, -1.3603515625, 0.1390380859375, 2.865234375, -0.1826171875};
static const double LNH_M[6] = {1.3125, -0.65625, 0.125, -0.375, 1.9375, 0};
static const double LNH_R[6] = {0.55615234375, 0.460693359375, 0.61181640625, 0.46728515625, 0.53369140625, 0.48681640625};
static const double LNB_DX[24] = {-0.61688029766082764, 0.36287033557891846, -0.23811528086662292, 0.49212515354156494, -0.30766534805297852, -0.13815437257289886, 0.55636274814605713, -0.11054302752017975, -0.41008579730987549, 0.27816009521484375, -0.079154312610626221, 0.21107998490333557, 0.020885646343231201, -0.37215673923492432, 0.72098541259765625, -0.36971443891525269, -0.16842904686927795, -0.18957436084747314, 0.18363922834396362, 0.17436417937278748, 0.076975420117378235, 0.27374809980392456, -0.092754289507865906, -0.25796926021575928};
static const double LNB_DW[4] = {-2.4563858509063721, -1.9941426515579224, -1.0287840366363525, 0.39744305610656738};
static const double LNB_DB[4] = {-1.5, 0.75, 0.25, -0.25};
static const double LNB2_DX[24] = {-0.56593799591064453, 0.33550918102264404, -0.2667313814163208, 0.58780080080032349, 0.12630525231361389, -0.28827518224716187, 0.54279941320419312, 0.16508075594902039, -0.47067052125930786, 0.38386160135269165, 0.0027918629348278046, -0.55253368616104126, -0.24314531683921814, -0.047564908862113953, 0.55889517068862915, -0.076525121927261353, 0.091355264186859131, 0.3100149929523468, 0.034695029258728027, -0.21292491257190704, 0.033434838056564331, -0.15878506004810333, -0.26790493726730347, -0.021545141935348511};
static const double RMS_Y[24] = {0.336993233598766, 0.2808276946656383, 2.695945868790128, 0.336993233598766, 1.322659110792005, 0.16533238884900062, 0.1102215925660004, -0.4408863702640016, 1.3724845795361345, -0.45749485984537813, -3.049965732302521, 0.0, -2.416825857249708, -0.5178912551249374, 0.6905216734999164, -0.11508694558331942, 2.504188313793114, 0.09274771532567089, 0.7419817226053671, 0.25505621714559495, -1.4605917556097583, -0.060857989817073264, 3.1646154704878096, -0.1825739694512198};
static const double RMS_R[6] = {0.4493243114650213, 0.4408863702640016, 0.6099931464605042, 0.46034778233327767, 0.37099086130268355, 0.4868639185365861};
static const double RMSB_DX[24] = {-0.8120084682469342, -0.18851761724120703, -0.26647661696513714, 0.3232615418327033, 0.13453400827160206, 0.17688178156552506, 0.8798478417419159, 0.06159676115479709, -0.7819975227299257, -0.09575523296185853, -0.5266502348316363, -0.19062285826890757, 0.32392025630395027, 0.1288058901557531, 1.1554424373573389, 0.022674427696970437, -0.101424549343682, -0.220599893942657, 0.07020892658263043, 0.10032683277656282, -0.0599549495487125, 0.13681759705486976, -0.22968490225011096, -0.3948996536097057};
static const double RMSB_DW[4] = {-3.7633728830090654, -0.0804025023088859, -1.7839385774941494, 0.18450641492569111};
static const double LP[24] = {-3.2401974201202393, -4.9901971817016602, -0.74019736051559448, -0.74019736051559448, -0.19865544140338898, -2.948655366897583, -2.073655366897583, -6.1986556053161621, -0.80712109804153442, -0.80712109804153442, -4.8071212768554688, -2.3071210384368896, -5.9851408004760742, -0.23514099419116974, -1.7351410388946533, -3.4851410388946533, -0.19120641052722931, -5.1912064552307129, -3.6912064552307129, -1.9412064552307129, -5.3117403984069824, -3.0617406368255615, -0.061740584671497345, -4.8117403984069824};
static const double NLL_W_0[6] = {1.6200987100601196, 9.2979831695556641, 0, 3.4702820777893066, 5.1912064552307129, 7.2176103591918945};
static const double NLL_W_0_TW[1] = {0};
static const double NLL_0[6] = {3.2401974201202393, 6.1986556053161621, 0, 1.7351410388946533, 5.1912064552307129, 4.8117403984069824};
static const double NLL_0_TW[1] = {0};
static const double NLL_W_1[1] = {4.122642993927002};
static const double NLL_W_1_TW[1] = {6.5};
static const double NLL_1[1] = {4.2353887557983398};
static const double NLL_1_TW[1] = {5};
static const double NLL_W_2[1] = {26.79718017578125};
static const double NLL_W_2_TW[1] = {6.5};
static const double NLL_2[1] = {21.176942825317383};
static const double NLL_2_TW[1] = {5};
static const double NLL_1D[1] = {2.073655366897583};
static const double NLL_1D_TW[1] = {2};
static const double NLLB_W_1[24] = {-0.13076923787593842, 0, 0, 0, 0, 0, 0, -0.39230769872665405, 0, 0, 0, 0, 0, 0, -0.52307695150375366, 0, 0, -0.26153847575187683, 0, 0, 0, 0, 0, -0.39230769872665405};
static const double NLLB_W_0[24] = {-0.25, 0, 0, 0, 0, 0, 0, 1.5, 0, 0, 0, 0, 0, 0, -3, 0, 0, -0.25, 0, 0, 0, 0, 0, 1.125};
static const double NLLB_2[24] = {0.5, 0, 0, 0, 0, 0, 0, 0.5, 0, 0, 0, 0, 0, 0, 0.5, 0, 0, 0.5, 0, 0, 0, 0, 0, 0.5};

/* ---------------------------------------------------------------------------
 * Helpers (tensors with guard bytes, arguments, the runner: check_cpu.h);
 * comparisons */

static rgpu_arg a_dt(int dt) { rgpu_arg a; memset(&a, 0, sizeof a); a.kind = RGPU_ARG_DTYPE; a.v.i = dt; return a; }

#define RUN_OK(...) ASSERT_STATUS_OK(run_op(__VA_ARGS__))
#define RUN_ERR(code, ...) ASSERT_STATUS_ERR(code, run_op(__VA_ARGS__))

/* the comparison tolerances for dtype dt (integers and bool: exact) */
static void tolerances(int dt, double *rt, double *at)
{
    static const struct { int dt; double rtol, atol; } t[] = {
        { RGPU_F32, 1.3e-6, 1e-5 }, { RGPU_F64, 1e-7, 1e-7 }, { RGPU_F16, 1e-3, 1e-3 }, { RGPU_BF16, 1.6e-2, 1.6e-2 },
    };
    *rt = *at = 0.0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].dt == dt) *rt = t[i].rtol, *at = t[i].atol;
}

/* v's elements (logical order) against want[0..n), at v's dtype tolerance */
static void expect_at(const rgpu_view *v, const double *want, int64_t n, const char *what, int line)
{
    ck_assert_msg(numel(v) == n, "%s (line %d): %lld elements, want %lld", what, line, (long long)numel(v), (long long)n);
    double rt, at;
    tolerances(v->dtype, &rt, &at);
    for (int64_t i = 0; i < n; i++) {
        double g = vget(v, i), w = want[i];
        if (isnan(w)) { ck_assert_msg(isnan(g), "%s (line %d)[%lld]: got %.9g, want NaN", what, line, (long long)i, g); continue; }
        if (isinf(w)) { ck_assert_msg(g == w, "%s (line %d)[%lld]: got %.9g, want %g", what, line, (long long)i, g, w); continue; }
        ck_assert_msg(fabs(g - w) <= at + rt * fabs(w), "%s (line %d)[%lld]: got %.9g, want %.9g", what, line,
                      (long long)i, g, w);
    }
}
#define EXPECT(v, want) expect_at(&(v), (want), (int64_t)(sizeof(want) / sizeof((want)[0])), #want, __LINE__)
#define EXPECT_N(v, want, n) expect_at(&(v), (want), (n), #want, __LINE__)
/* RUN_OK(op, ...) and then EXPECT(out, want) */
#define RUN_EXPECT(out, want, ...) do { RUN_OK(__VA_ARGS__); EXPECT(out, want); } while (0)

/* X24 as a (2,3,4) tensor of dtype dt; its transpose(0,2) */
static rgpu_view mkX(int dt) { return mk(dt, 3, SZ(2, 3, 4), X24); }
static rgpu_view mkXn(void)
{
    rgpu_view x = mkX(RGPU_F32);
    ((float *)x.data)[6] = NAN;    /* [0,1,2] */
    ((float *)x.data)[20] = NAN;   /* [1,2,0] */
    return x;
}

/* ---------------------------------------------------------------------------
 * amax / amin */

START_TEST(test_amax_amin)
{
    rgpu_view x = mkX(RGPU_F32);
    rgpu_view o = mk(RGPU_F32, 3, SZ(1, 3, 1), NULL);
    RUN_EXPECT(o, AMAX_02K, RGPU_OP_AMAX, INS(&x), OUTS(&o), ARGS(A_INTS(0, -1), a_bool(1)));
    rgpu_view o2 = mk(RGPU_F32, 2, SZ(2, 4), NULL);
    RUN_EXPECT(o2, AMIN_1, RGPU_OP_AMIN, INS(&x), OUTS(&o2), ARGS(A_INTS(-2), a_bool(0)));
    rgpu_view o0 = mk(RGPU_F32, 0, NULL, NULL);
    RUN_EXPECT(o0, AMAX_ALL, RGPU_OP_AMAX, INS(&x), OUTS(&o0), ARGS(A_NOINTS, a_bool(0)));
    RUN_OK(RGPU_OP_AMAX, INS(&x), OUTS(&o0), ARGS(a_none(), a_bool(0)));   /* dims None = all */
    EXPECT(o0, AMAX_ALL);
    /* transposed input, strided output (every other element of a row) */
    rgpu_view xt = tr(x, 0, 2);
    rgpu_view ot = mk_s(RGPU_F32, 2, SZ(4, 3), SZ(6, 2), NULL);
    RUN_EXPECT(ot, AMAX_T_2, RGPU_OP_AMAX, INS(&xt), OUTS(&ot), ARGS(A_INTS(2), a_bool(0)));
    /* NaN propagates */
    rgpu_view xn = mkXn();
    rgpu_view on = mk(RGPU_F32, 2, SZ(2, 3), NULL);
    RUN_EXPECT(on, AMAX_N_2, RGPU_OP_AMAX, INS(&xn), OUTS(&on), ARGS(A_INTS(2), a_bool(0)));
    RUN_EXPECT(o2, AMIN_N_1, RGPU_OP_AMIN, INS(&xn), OUTS(&o2), ARGS(A_INTS(1), a_bool(0)));
}
END_TEST

START_TEST(test_amax_dtypes)
{
    static const double xi[] = {3, -7, 9, 9, -2, -2, 5, 0};
    rgpu_view x = mk(RGPU_I32, 2, SZ(2, 4), xi);
    rgpu_view o = mk(RGPU_I32, 1, SZ(2), NULL), o4 = mk(RGPU_I32, 1, SZ(4), NULL);
    RUN_EXPECT(o, AMAX_I_1, RGPU_OP_AMAX, INS(&x), OUTS(&o), ARGS(A_INTS(1), a_bool(0)));
    RUN_EXPECT(o4, AMIN_I_0, RGPU_OP_AMIN, INS(&x), OUTS(&o4), ARGS(A_INTS(0), a_bool(0)));
    /* int64 beyond 2^53 compares exactly */
    static const int64_t big[] = {INT64_MAX - 1, INT64_MAX, INT64_MIN, INT64_MIN + 1};
    rgpu_view xb = mk(RGPU_I64, 1, SZ(4), NULL);
    memcpy(xb.data, big, sizeof big);
    rgpu_view ob = mk(RGPU_I64, 0, NULL, NULL);
    RUN_OK(RGPU_OP_AMAX, INS(&xb), OUTS(&ob), ARGS(A_INTS(0), a_bool(0)));
    ck_assert(*(int64_t *)ob.data == INT64_MAX);
    RUN_OK(RGPU_OP_AMIN, INS(&xb), OUTS(&ob), ARGS(A_INTS(0), a_bool(0)));
    ck_assert(*(int64_t *)ob.data == INT64_MIN);
    /* bool, bf16 */
    static const double bv[] = {0, 1, 0, 0};
    rgpu_view xbool = mk(RGPU_BOOL, 2, SZ(2, 2), bv), obool = mk(RGPU_BOOL, 1, SZ(2), NULL);
    RUN_OK(RGPU_OP_AMAX, INS(&xbool), OUTS(&obool), ARGS(A_INTS(1), a_bool(0)));
    static const double bmax[] = {1, 0};
    EXPECT(obool, bmax);
    rgpu_view xh = mkX(RGPU_BF16), oh = mk(RGPU_BF16, 3, SZ(1, 3, 1), NULL);
    RUN_EXPECT(oh, AMAX_02K, RGPU_OP_AMAX, INS(&xh), OUTS(&oh), ARGS(A_INTS(0, 2), a_bool(1)));
    /* 0-d input, dim 0 and -1 */
    static const double v3[] = {3};
    rgpu_view x0 = mk(RGPU_F64, 0, NULL, v3), o0 = mk(RGPU_F64, 0, NULL, NULL);
    RUN_EXPECT(o0, v3, RGPU_OP_AMIN, INS(&x0), OUTS(&o0), ARGS(A_INTS(-1), a_bool(1)));
}
END_TEST

START_TEST(test_amax_errors)
{
    rgpu_view x = mkX(RGPU_F32);
    rgpu_view o = mk(RGPU_F32, 2, SZ(2, 3), NULL);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_AMAX, INS(&x), OUTS(&o), ARGS(A_INTS(1), a_bool(0)));     /* want (2,4) */
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_AMAX, INS(&x), OUTS(&o), ARGS(A_INTS(2), a_bool(1)));     /* want (2,3,1) */
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_AMAX, INS(&x), OUTS(&o), ARGS(A_INTS(3), a_bool(0)));     /* dim range */
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_AMAX, INS(&x), OUTS(&o), ARGS(A_INTS(2, -1), a_bool(0))); /* twice */
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_AMAX, INS(&x), OUTS(&o), ARGS(a_flt(2), a_bool(0)));    /* dims kind */
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_AMAX, INS(&x), OUTS(&o), ARGS(A_INTS(2), a_int(0)));    /* keepdim kind */
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_AMAX, INS(&x), OUTS(&o), ARGS(A_INTS(2)));              /* missing */
    /* no identity: an empty reduced dim fails, an empty kept dim is fine */
    rgpu_view xe = mk(RGPU_F32, 2, SZ(0, 3), NULL);
    rgpu_view oe = mk(RGPU_F32, 1, SZ(3), NULL), oe0 = mk(RGPU_F32, 1, SZ(0), NULL);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_AMAX, INS(&xe), OUTS(&oe), ARGS(A_INTS(0), a_bool(0)));
    ck_assert_str_eq(g_err, "amax(): Expected reduction dim 0 to have non-zero size.");
    RUN_OK(RGPU_OP_AMIN, INS(&xe), OUTS(&oe0), ARGS(A_INTS(1), a_bool(0)));
    /* an out view with a bad dtype / missing input */
    rgpu_view bad = o;
    bad.dtype = 77;
    RUN_ERR(RGPU_ERR_BAD_DTYPE, RGPU_OP_AMAX, INS(&x), OUTS(&bad), ARGS(A_INTS(2), a_bool(0)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_AMAX, INS(NULL), OUTS(&o), ARGS(A_INTS(2), a_bool(0)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * argmax / argmin / max.dim / min.dim */

START_TEST(test_argmax)
{
    rgpu_view x = mkX(RGPU_F32);
    rgpu_view o = mk(RGPU_I64, 2, SZ(2, 3), NULL);
    RUN_OK(RGPU_OP_ARGMAX, INS(&x), OUTS(&o), ARGS(a_int(2), a_bool(0)));
    EXPECT(o, ARGMAX_2);   /* ties -> first index */
    rgpu_view ok = mk(RGPU_I64, 3, SZ(2, 1, 4), NULL);
    RUN_EXPECT(ok, ARGMIN_1K, RGPU_OP_ARGMIN, INS(&x), OUTS(&ok), ARGS(a_int(1), a_bool(1)));
    rgpu_view o0 = mk(RGPU_I64, 0, NULL, NULL), o111 = mk(RGPU_I64, 3, SZ(1, 1, 1), NULL);
    RUN_EXPECT(o0, ARGMAX_ALL, RGPU_OP_ARGMAX, INS(&x), OUTS(&o0), ARGS(a_none(), a_bool(0)));
    RUN_EXPECT(o111, ARGMIN_ALL, RGPU_OP_ARGMIN, INS(&x), OUTS(&o111), ARGS(a_none(), a_bool(1)));
    /* flattened over a transposed view: logical order, not memory order */
    rgpu_view xt = tr(x, 0, 2);
    RUN_OK(RGPU_OP_ARGMAX, INS(&xt), OUTS(&o0), ARGS(a_none(), a_bool(0)));
    ck_assert_int_eq(*(int64_t *)o0.data, 3);   /* X[1,1,0] = XT[0,1,1] */
    rgpu_view ot = mk(RGPU_I64, 2, SZ(3, 2), NULL);
    RUN_EXPECT(ot, ARGMAX_T_0, RGPU_OP_ARGMAX, INS(&xt), OUTS(&ot), ARGS(a_int(0), a_bool(0)));
    /* NaN is the max and the min; the first NaN wins */
    rgpu_view xn = mkXn();
    RUN_EXPECT(o, ARGMAX_N_2, RGPU_OP_ARGMAX, INS(&xn), OUTS(&o), ARGS(a_int(2), a_bool(0)));
    RUN_EXPECT(o, ARGMIN_N_2, RGPU_OP_ARGMIN, INS(&xn), OUTS(&o), ARGS(a_int(-1), a_bool(0)));
    /* ints */
    static const double xi[] = {3, -7, 9, 9, -2, -2, 5, 0};
    rgpu_view x2 = mk(RGPU_I32, 2, SZ(2, 4), xi), o2 = mk(RGPU_I64, 1, SZ(2), NULL);
    RUN_EXPECT(o2, ARGMAX_I_1, RGPU_OP_ARGMAX, INS(&x2), OUTS(&o2), ARGS(a_int(1), a_bool(0)));
    RUN_EXPECT(o2, ARGMIN_I_1, RGPU_OP_ARGMIN, INS(&x2), OUTS(&o2), ARGS(a_int(1), a_bool(0)));
    /* errors: bool input, empty, non-int64 out, dim kind */
    rgpu_view xb = mk(RGPU_BOOL, 1, SZ(2), NULL);
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_ARGMAX, INS(&xb), OUTS(&o0), ARGS(a_int(0), a_bool(0)));
    rgpu_view xe = mk(RGPU_F32, 1, SZ(0), NULL);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_ARGMAX, INS(&xe), OUTS(&o0), ARGS(a_none(), a_bool(0)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_ARGMIN, INS(&xe), OUTS(&o0), ARGS(a_int(0), a_bool(0)));
    rgpu_view o32 = mk(RGPU_I32, 1, SZ(2), NULL);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_ARGMAX, INS(&x2), OUTS(&o32), ARGS(a_int(1), a_bool(0)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_ARGMAX, INS(&x2), OUTS(&o2), ARGS(A_INTS(1), a_bool(0)));
}
END_TEST

START_TEST(test_max_min_dim)
{
    rgpu_view x = mkX(RGPU_F32);
    rgpu_view v = mk(RGPU_F32, 2, SZ(2, 4), NULL), i = mk(RGPU_I64, 2, SZ(2, 4), NULL);
    RUN_EXPECT(v, MAX1_V, RGPU_OP_MAX_DIM, INS(&x), OUTS(&v, &i), ARGS(a_int(1), a_bool(0)));
    EXPECT(i, MAX1_I);
    rgpu_view xn = mkXn();
    rgpu_view v2 = mk(RGPU_F32, 3, SZ(2, 3, 1), NULL), i2 = mk_s(RGPU_I64, 3, SZ(2, 3, 1), SZ(1, 2, 1), NULL);
    RUN_EXPECT(v2, MINN2_V, RGPU_OP_MIN_DIM, INS(&xn), OUTS(&v2, &i2), ARGS(a_int(2), a_bool(1)));
    EXPECT(i2, MINN2_I);
    /* indices not wanted */
    RUN_EXPECT(v, MAX1_V, RGPU_OP_MAX_DIM, INS(&x), OUTS(&v, NULL), ARGS(a_int(1), a_bool(0)));
    /* 0-d */
    static const double v7[] = {7}, z[] = {0};
    rgpu_view x0 = mk(RGPU_I16, 0, NULL, v7), v0 = mk(RGPU_I16, 0, NULL, NULL), i0 = mk(RGPU_I64, 0, NULL, NULL);
    RUN_EXPECT(v0, v7, RGPU_OP_MAX_DIM, INS(&x0), OUTS(&v0, &i0), ARGS(a_int(0), a_bool(0)));
    EXPECT(i0, z);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_MAX_DIM, INS(&x), OUTS(&v, &i), ARGS(a_none(), a_bool(0)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * var / std / linalg_vector_norm */

START_TEST(test_var_std)
{
    rgpu_view x = mkX(RGPU_F32);
    rgpu_view o = mk(RGPU_F32, 2, SZ(2, 3), NULL);
    RUN_EXPECT(o, VAR_2, RGPU_OP_VAR, INS(&x), OUTS(&o), ARGS(A_INTS(2), a_flt(1), a_bool(0)));
    RUN_OK(RGPU_OP_VAR, INS(&x), OUTS(&o), ARGS(A_INTS(2), a_none(), a_bool(0)));   /* default correction 1 */
    EXPECT(o, VAR_2);
    rgpu_view ok = mk(RGPU_F32, 3, SZ(1, 1, 4), NULL);
    RUN_EXPECT(ok, STD_01K, RGPU_OP_STD, INS(&x), OUTS(&ok), ARGS(A_INTS(0, 1), a_int(1), a_bool(1)));
    rgpu_view o0 = mk(RGPU_F64, 0, NULL, NULL);
    rgpu_view x64 = mkX(RGPU_F64);
    RUN_EXPECT(o0, VAR_ALL_C0, RGPU_OP_VAR, INS(&x64), OUTS(&o0), ARGS(A_NOINTS, a_flt(0), a_bool(0)));
    rgpu_view xt = tr(x, 0, 2), ot = mk(RGPU_F32, 2, SZ(4, 2), NULL);
    RUN_EXPECT(ot, STD_T_1_C2, RGPU_OP_STD, INS(&xt), OUTS(&ot), ARGS(A_INTS(1), a_flt(2), a_bool(0)));
    rgpu_view xh = mkX(RGPU_F16), oh = mk(RGPU_F16, 2, SZ(2, 3), NULL);
    RUN_EXPECT(oh, VAR_H_2, RGPU_OP_VAR, INS(&xh), OUTS(&oh), ARGS(A_INTS(2), a_flt(1), a_bool(0)));
    /* N - correction <= 0: 0/0 = NaN, x/0 = inf; empty: NaN */
    static const double one[] = {1}, two[] = {1, 2}, nan1[] = {NAN}, inf1[] = {INFINITY};
    rgpu_view x1 = mk(RGPU_F32, 1, SZ(1), one), x2 = mk(RGPU_F32, 1, SZ(2), two), xe = mk(RGPU_F32, 1, SZ(0), NULL);
    rgpu_view s = mk(RGPU_F32, 0, NULL, NULL);
    RUN_EXPECT(s, nan1, RGPU_OP_VAR, INS(&x1), OUTS(&s), ARGS(A_INTS(0), a_flt(1), a_bool(0)));
    RUN_EXPECT(s, inf1, RGPU_OP_VAR, INS(&x2), OUTS(&s), ARGS(A_INTS(0), a_flt(3), a_bool(0)));
    RUN_EXPECT(s, nan1, RGPU_OP_STD, INS(&xe), OUTS(&s), ARGS(A_INTS(0), a_flt(1), a_bool(0)));
    /* integer input is not supported (ATen: floating point and complex only) */
    rgpu_view xi = mk(RGPU_I32, 1, SZ(2), two);
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_VAR, INS(&xi), OUTS(&s), ARGS(A_INTS(0), a_flt(1), a_bool(0)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_VAR, INS(&x2), OUTS(&s), ARGS(A_INTS(0), a_bool(1), a_bool(0)));
}
END_TEST

START_TEST(test_norm)
{
    rgpu_view x = mkX(RGPU_F32);
    rgpu_view o = mk(RGPU_F32, 2, SZ(2, 3), NULL);
    static const struct { double ord; const double *want; } c[] = {
        { 2, NORM_2_2 }, { 1, NORM_1_2 }, { INFINITY, NORM_INF_2 }, { -INFINITY, NORM_NINF_2 },
        { 0, NORM_0_2 }, { 3, NORM_3_2 }, { 0.5, NORM_P5_2 }, { -1, NORM_M1_2 },
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        RUN_OK(RGPU_OP_NORM, INS(&x), OUTS(&o), ARGS(a_flt(c[k].ord), A_INTS(2), a_bool(0)));
        EXPECT_N(o, c[k].want, 6);
    }
    RUN_OK(RGPU_OP_NORM, INS(&x), OUTS(&o), ARGS(a_int(2), A_INTS(-1), a_bool(0)));   /* int ord */
    EXPECT(o, NORM_2_2);
    rgpu_view o0 = mk(RGPU_F32, 0, NULL, NULL);
    RUN_EXPECT(o0, NORM_2_ALL, RGPU_OP_NORM, INS(&x), OUTS(&o0), ARGS(a_flt(2), A_NOINTS, a_bool(0)));
    rgpu_view xn = mkXn();
    RUN_EXPECT(o, NORM_INF_N_2, RGPU_OP_NORM, INS(&xn), OUTS(&o), ARGS(a_flt(INFINITY), A_INTS(2), a_bool(0)));
    /* dtype=float64 on a transposed f32 input */
    rgpu_view xt = tr(x, 0, 2), od = mk(RGPU_F64, 1, SZ(2), NULL);
    RUN_EXPECT(od, NORM_2_T_01_D, RGPU_OP_NORM, INS(&xt), OUTS(&od), ARGS(a_flt(2), A_INTS(0, 1), a_bool(0)));
    /* empty: 2-norm is 0, inf-norm has no identity */
    rgpu_view xe = mk(RGPU_F32, 2, SZ(0, 3), NULL), oe = mk(RGPU_F32, 1, SZ(3), NULL);
    static const double z3[] = {0, 0, 0};
    RUN_EXPECT(oe, z3, RGPU_OP_NORM, INS(&xe), OUTS(&oe), ARGS(a_flt(2), A_INTS(0), a_bool(0)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_NORM, INS(&xe), OUTS(&oe), ARGS(a_flt(INFINITY), A_INTS(0), a_bool(0)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_NORM, INS(&xe), OUTS(&oe), ARGS(a_flt(-1), A_INTS(0), a_bool(0)));
    rgpu_view xi = mk(RGPU_I64, 1, SZ(3), z3), oi = mk(RGPU_F32, 0, NULL, NULL);
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_NORM, INS(&xi), OUTS(&oi), ARGS(a_flt(2), A_NOINTS, a_bool(0)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NORM, INS(&x), OUTS(&o), ARGS(a_bool(1), A_INTS(2), a_bool(0)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * any / all / prod / cumsum */

START_TEST(test_any_all)
{
    static const double xa[] = {0, 0, 1, 0, 0, 0, 2, -1, 3};
    rgpu_view x = mk(RGPU_F32, 2, SZ(3, 3), xa), o = mk(RGPU_BOOL, 1, SZ(3), NULL);
    RUN_EXPECT(o, ANY_1, RGPU_OP_ANY, INS(&x), OUTS(&o), ARGS(A_INTS(1), a_bool(0)));
    RUN_EXPECT(o, ALL_1, RGPU_OP_ALL, INS(&x), OUTS(&o), ARGS(A_INTS(1), a_bool(0)));
    rgpu_view xt = tr(x, 0, 1);
    RUN_EXPECT(o, ALL_0, RGPU_OP_ALL, INS(&xt), OUTS(&o), ARGS(A_INTS(1), a_bool(0)));
    static const double xu[] = {0, 7, 3, 0};
    rgpu_view u = mk(RGPU_U8, 2, SZ(2, 2), xu), u0 = mk(RGPU_U8, 0, NULL, NULL), u1 = mk(RGPU_U8, 1, SZ(2), NULL);
    RUN_EXPECT(u0, ANY_U_ALL, RGPU_OP_ANY, INS(&u), OUTS(&u0), ARGS(A_NOINTS, a_bool(0)));
    RUN_EXPECT(u1, ALL_U_1, RGPU_OP_ALL, INS(&u), OUTS(&u1), ARGS(A_INTS(1), a_bool(0)));
    /* any.dims(x, []) reduces nothing (ATen), told apart from "all" by out's shape */
    rgpu_view ob = mk(RGPU_BOOL, 2, SZ(3, 3), NULL);
    RUN_OK(RGPU_OP_ANY, INS(&xt), OUTS(&ob), ARGS(A_NOINTS, a_bool(0)));
    static const double xt_bool[] = {0, 0, 1, 0, 0, 1, 1, 0, 1};
    EXPECT(ob, xt_bool);
    rgpu_view b11 = mk(RGPU_BOOL, 2, SZ(1, 1), NULL);
    RUN_OK(RGPU_OP_ALL, INS(&x), OUTS(&b11), ARGS(a_none(), a_bool(1)));
    static const double f1[] = {0};
    EXPECT(b11, f1);
    /* NaN is true; empty: any false, all true */
    static const double nanv[] = {NAN}, t[] = {1}, f[] = {0};
    rgpu_view xn = mk(RGPU_F64, 1, SZ(1), nanv), b0 = mk(RGPU_BOOL, 0, NULL, NULL);
    RUN_EXPECT(b0, t, RGPU_OP_ALL, INS(&xn), OUTS(&b0), ARGS(A_INTS(0), a_bool(0)));
    rgpu_view xe = mk(RGPU_F32, 1, SZ(0), NULL);
    RUN_EXPECT(b0, f, RGPU_OP_ANY, INS(&xe), OUTS(&b0), ARGS(A_INTS(0), a_bool(0)));
    RUN_EXPECT(b0, t, RGPU_OP_ALL, INS(&xe), OUTS(&b0), ARGS(A_INTS(0), a_bool(0)));
}
END_TEST

START_TEST(test_prod)
{
    static const double xp[] = {2, -3, 4, 5, 1, -1};
    rgpu_view x = mk(RGPU_I32, 2, SZ(2, 3), xp), o = mk(RGPU_I64, 1, SZ(2), NULL);
    RUN_EXPECT(o, PROD_I_1, RGPU_OP_PROD, INS(&x), OUTS(&o), ARGS(A_INTS(1), a_bool(0)));
    RUN_OK(RGPU_OP_PROD, INS(&x), OUTS(&o), ARGS(a_int(-1), a_bool(0)));   /* prod.dim_int: one int */
    EXPECT(o, PROD_I_1);
    rgpu_view xf = mkX(RGPU_F32), of = mk(RGPU_F32, 2, SZ(2, 3), NULL), o0 = mk(RGPU_F32, 0, NULL, NULL);
    RUN_EXPECT(of, PROD_F_02, RGPU_OP_PROD, INS(&xf), OUTS(&of), ARGS(A_INTS(2), a_bool(0)));
    RUN_EXPECT(o0, PROD_ALL, RGPU_OP_PROD, INS(&xf), OUTS(&o0), ARGS(A_NOINTS, a_bool(0)));
    /* int64 wraps */
    rgpu_view xb = mk(RGPU_I64, 1, SZ(2), NULL), ob = mk(RGPU_I64, 0, NULL, NULL);
    ((int64_t *)xb.data)[0] = INT64_C(1) << 62;
    ((int64_t *)xb.data)[1] = 4;
    RUN_OK(RGPU_OP_PROD, INS(&xb), OUTS(&ob), ARGS(A_INTS(0), a_bool(0)));
    ck_assert(*(int64_t *)ob.data == 0);
    /* empty: 1 */
    static const double one[] = {1, 1, 1};
    rgpu_view xe = mk(RGPU_F32, 2, SZ(0, 3), NULL), oe = mk(RGPU_F32, 1, SZ(3), NULL);
    RUN_EXPECT(oe, one, RGPU_OP_PROD, INS(&xe), OUTS(&oe), ARGS(A_INTS(0), a_bool(0)));
}
END_TEST

START_TEST(test_cumsum)
{
    rgpu_view x = mkX(RGPU_F32), o = mk(RGPU_F32, 3, SZ(2, 3, 4), NULL);
    RUN_EXPECT(o, CUMSUM_2, RGPU_OP_CUMSUM, INS(&x), OUTS(&o), ARGS(a_int(2)));
    rgpu_view xt = tr(x, 0, 2), ot = mk(RGPU_F32, 3, SZ(4, 3, 2), NULL);
    RUN_EXPECT(ot, CUMSUM_T_0, RGPU_OP_CUMSUM, INS(&xt), OUTS(&ot), ARGS(a_int(0)));
    /* in place on a transposed view */
    rgpu_view xi = mkX(RGPU_F32), xit = tr(xi, 0, 2);
    RUN_EXPECT(xit, CUMSUM_T_0, RGPU_OP_CUMSUM, INS(&xit), OUTS(&xit), ARGS(a_int(-3)));
    /* int32 -> int64, bf16 (float accumulation), f32 -> f64 */
    static const double xiv[] = {3, -7, 9, 9, -2, -2, 5, 0};
    rgpu_view x2 = mk(RGPU_I32, 2, SZ(2, 4), xiv), o2 = mk(RGPU_I64, 2, SZ(2, 4), NULL);
    RUN_EXPECT(o2, CUMSUM_I, RGPU_OP_CUMSUM, INS(&x2), OUTS(&o2), ARGS(a_int(1)));
    rgpu_view xb = mkX(RGPU_BF16), ob = mk(RGPU_BF16, 3, SZ(2, 3, 4), NULL);
    RUN_EXPECT(ob, CUMSUM_BF_1, RGPU_OP_CUMSUM, INS(&xb), OUTS(&ob), ARGS(a_int(1)));
    rgpu_view od = mk(RGPU_F64, 3, SZ(2, 3, 4), NULL);
    RUN_EXPECT(od, CUMSUM_F64_1, RGPU_OP_CUMSUM, INS(&x), OUTS(&od), ARGS(a_int(1)));
    /* bool -> int64 counts */
    static const double bv[] = {1, 0, 1}, bc[] = {1, 1, 2};
    rgpu_view xbool = mk(RGPU_BOOL, 1, SZ(3), bv), obool = mk(RGPU_I64, 1, SZ(3), NULL);
    RUN_EXPECT(obool, bc, RGPU_OP_CUMSUM, INS(&xbool), OUTS(&obool), ARGS(a_int(0)));
    /* 0-d, zero-size */
    static const double v3[] = {3};
    rgpu_view x0 = mk(RGPU_F32, 0, NULL, v3), o0 = mk(RGPU_F32, 0, NULL, NULL);
    RUN_EXPECT(o0, v3, RGPU_OP_CUMSUM, INS(&x0), OUTS(&o0), ARGS(a_int(0)));
    rgpu_view xe = mk(RGPU_F32, 2, SZ(3, 0), NULL), oe = mk(RGPU_F32, 2, SZ(3, 0), NULL);
    RUN_OK(RGPU_OP_CUMSUM, INS(&xe), OUTS(&oe), ARGS(a_int(1)));
    /* errors */
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_CUMSUM, INS(&x), OUTS(&ot), ARGS(a_int(0)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_CUMSUM, INS(&x), OUTS(&o), ARGS(a_int(3)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_CUMSUM, INS(&x), OUTS(&o), ARGS(a_none()));
}
END_TEST

/* ---------------------------------------------------------------------------
 * softmax family */

START_TEST(test_softmax)
{
    rgpu_view x = mkX(RGPU_F32), o = mk(RGPU_F32, 3, SZ(2, 3, 4), NULL);
    RUN_EXPECT(o, SM_2, RGPU_OP_SOFTMAX, INS(&x), OUTS(&o), ARGS(a_int(-1), a_bool(0)));
    RUN_EXPECT(o, LSM_2, RGPU_OP_LOG_SOFTMAX, INS(&x), OUTS(&o), ARGS(a_int(2), a_bool(0)));
    RUN_EXPECT(o, SM_0, RGPU_OP_SOFTMAX, INS(&x), OUTS(&o), ARGS(a_int(0), a_bool(0)));
    /* transposed input, strided output */
    rgpu_view xt = tr(x, 0, 2), ot = tr(mk(RGPU_F32, 3, SZ(2, 3, 4), NULL), 0, 2);
    RUN_EXPECT(ot, LSM_T_1, RGPU_OP_LOG_SOFTMAX, INS(&xt), OUTS(&ot), ARGS(a_int(1), a_bool(0)));
    /* in place */
    rgpu_view xi = mkX(RGPU_F32);
    RUN_EXPECT(xi, SM_2, RGPU_OP_SOFTMAX, INS(&xi), OUTS(&xi), ARGS(a_int(2), a_bool(0)));
    /* -inf entries; an all -inf row is NaN */
    double xinf[24];
    memcpy(xinf, X24, sizeof xinf);
    for (int i = 0; i < 4; i++) xinf[i] = -INFINITY;
    xinf[5] = -INFINITY;
    rgpu_view xf = mk(RGPU_F32, 3, SZ(2, 3, 4), xinf);
    RUN_EXPECT(o, SM_INF_2, RGPU_OP_SOFTMAX, INS(&xf), OUTS(&o), ARGS(a_int(2), a_bool(0)));
    RUN_EXPECT(o, LSM_INF_2, RGPU_OP_LOG_SOFTMAX, INS(&xf), OUTS(&o), ARGS(a_int(2), a_bool(0)));
    /* f16 in, half_to_float: f32 out; bf16 in and out */
    rgpu_view xh = mkX(RGPU_F16);
    RUN_EXPECT(o, SM_H_2, RGPU_OP_SOFTMAX, INS(&xh), OUTS(&o), ARGS(a_int(2), a_bool(1)));
    rgpu_view xb = mkX(RGPU_BF16), ob = mk(RGPU_BF16, 3, SZ(2, 3, 4), NULL);
    RUN_EXPECT(ob, SM_BF_1, RGPU_OP_SOFTMAX, INS(&xb), OUTS(&ob), ARGS(a_int(1), a_bool(0)));
    /* 0-d: 1; zero-size */
    static const double v3[] = {3}, one[] = {1}, zero[] = {0};
    rgpu_view x0 = mk(RGPU_F64, 0, NULL, v3), o0 = mk(RGPU_F64, 0, NULL, NULL);
    RUN_EXPECT(o0, one, RGPU_OP_SOFTMAX, INS(&x0), OUTS(&o0), ARGS(a_int(0), a_bool(0)));
    RUN_EXPECT(o0, zero, RGPU_OP_LOG_SOFTMAX, INS(&x0), OUTS(&o0), ARGS(a_int(-1), a_bool(0)));
    rgpu_view xe = mk(RGPU_F32, 2, SZ(0, 5), NULL), oe = mk(RGPU_F32, 2, SZ(0, 5), NULL);
    RUN_OK(RGPU_OP_SOFTMAX, INS(&xe), OUTS(&oe), ARGS(a_int(1), a_bool(0)));
    /* errors */
    rgpu_view xint = mk(RGPU_I32, 1, SZ(2), NULL), oint = mk(RGPU_I32, 1, SZ(2), NULL);
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_SOFTMAX, INS(&xint), OUTS(&oint), ARGS(a_int(0), a_bool(0)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_SOFTMAX, INS(&x), OUTS(&ot), ARGS(a_int(0), a_bool(0)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_SOFTMAX, INS(&x), OUTS(&o), ARGS(a_int(-4), a_bool(0)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_LOG_SOFTMAX, INS(&x), OUTS(&o), ARGS(a_int(0), a_int(0)));
}
END_TEST

START_TEST(test_softmax_backward)
{
    rgpu_view x = mkX(RGPU_F32), g = mk(RGPU_F32, 3, SZ(2, 3, 4), G24);
    rgpu_view y = mk(RGPU_F32, 3, SZ(2, 3, 4), NULL), gx = mk(RGPU_F32, 3, SZ(2, 3, 4), NULL);
    RUN_OK(RGPU_OP_SOFTMAX, INS(&x), OUTS(&y), ARGS(a_int(2), a_bool(0)));
    RUN_EXPECT(gx, SMB_2, RGPU_OP_SOFTMAX_BACKWARD, INS(&g, &y), OUTS(&gx), ARGS(a_int(2), a_dt(RGPU_F32)));
    RUN_OK(RGPU_OP_SOFTMAX, INS(&x), OUTS(&y), ARGS(a_int(1), a_bool(0)));
    rgpu_view gt = tr(mk(RGPU_F32, 3, SZ(4, 3, 2), NULL), 0, 2);   /* strided out */
    RUN_EXPECT(gt, SMB_1, RGPU_OP_SOFTMAX_BACKWARD, INS(&g, &y), OUTS(&gt), ARGS(a_int(1), a_dt(RGPU_F32)));
    RUN_OK(RGPU_OP_LOG_SOFTMAX, INS(&x), OUTS(&y), ARGS(a_int(2), a_bool(0)));
    RUN_EXPECT(gx, LSMB_2, RGPU_OP_LOG_SOFTMAX_BACKWARD, INS(&g, &y), OUTS(&gx), ARGS(a_int(-1), a_dt(RGPU_F32)));
    /* in place over grad */
    RUN_EXPECT(g, LSMB_2, RGPU_OP_LOG_SOFTMAX_BACKWARD, INS(&g, &y), OUTS(&g), ARGS(a_int(-1), a_dt(RGPU_F32)));
    /* half_to_float backward: f32 grads, f16 result */
    rgpu_view gh = mk(RGPU_F16, 3, SZ(2, 3, 4), NULL);
    RUN_OK(RGPU_OP_LOG_SOFTMAX_BACKWARD, INS(&gx, &y), OUTS(&gh), ARGS(a_int(-1), a_dt(RGPU_F16)));
    /* errors */
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SOFTMAX_BACKWARD, INS(&g, &y), OUTS(&gx), ARGS(a_int(2), a_dt(RGPU_F64)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SOFTMAX_BACKWARD, INS(&g, &y), OUTS(&gx), ARGS(a_int(2), a_int(0)));
    rgpu_view y2 = mk(RGPU_F32, 2, SZ(6, 4), NULL);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_SOFTMAX_BACKWARD, INS(&g, &y2), OUTS(&gx), ARGS(a_int(2), a_dt(RGPU_F32)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SOFTMAX_BACKWARD, INS(&g, NULL), OUTS(&gx), ARGS(a_int(2), a_dt(RGPU_F32)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * layer norm */

/* layer norm of the (2,3,4) x over its last dim, with w and b, eps 1e-5: y,
 * mean and rstd against the 24, 6 and 6 values of want_y, want_m, want_r */
static void expect_layer_norm(rgpu_view *x, rgpu_view *w, rgpu_view *b, rgpu_view *y, rgpu_view *m, rgpu_view *r,
                              const double *want_y, const double *want_m, const double *want_r)
{
    RUN_OK(RGPU_OP_LAYER_NORM, INS(x, w, b), OUTS(y, m, r), ARGS(A_INTS(4), a_flt(1e-5)));
    EXPECT_N(*y, want_y, 24);
    EXPECT_N(*m, want_m, 6);
    EXPECT_N(*r, want_r, 6);
}

START_TEST(test_layer_norm)
{
    rgpu_view x = mkX(RGPU_F32), w = mk(RGPU_F32, 1, SZ(4), W4), b = mk(RGPU_F32, 1, SZ(4), B4);
    rgpu_view y = mk(RGPU_F32, 3, SZ(2, 3, 4), NULL);
    rgpu_view m = mk(RGPU_F32, 3, SZ(2, 3, 1), NULL), r = mk(RGPU_F32, 3, SZ(2, 3, 1), NULL);
    expect_layer_norm(&x, &w, &b, &y, &m, &r, LN_Y, LN_M, LN_R);
    /* two normalized dims, no weight / bias */
    rgpu_view m2 = mk(RGPU_F32, 3, SZ(2, 1, 1), NULL), r2 = mk(RGPU_F32, 3, SZ(2, 1, 1), NULL);
    RUN_EXPECT(y, LN2_Y, RGPU_OP_LAYER_NORM, INS(&x, NULL, NULL), OUTS(&y, &m2, &r2), ARGS(A_INTS(3, 4), a_flt(1e-5)));
    EXPECT(m2, LN2_M);
    EXPECT(r2, LN2_R);
    /* transposed x (rows strided), strided bias, mean/rstd not wanted */
    rgpu_view xt = tr(x, 0, 2), yt = mk(RGPU_F32, 3, SZ(4, 3, 2), NULL);
    rgpu_view bt = mk_s(RGPU_F32, 1, SZ(2), SZ(3), B4);
    RUN_EXPECT(yt, LNT_Y, RGPU_OP_LAYER_NORM, INS(&xt, NULL, &bt), OUTS(&yt, NULL, NULL), ARGS(A_INTS(2), a_flt(1e-3)));
    rgpu_view mt = mk(RGPU_F32, 3, SZ(4, 3, 1), NULL), rt = mk(RGPU_F32, 3, SZ(4, 3, 1), NULL);
    RUN_EXPECT(mt, LNT_M, RGPU_OP_LAYER_NORM, INS(&xt, NULL, &bt), OUTS(&yt, &mt, &rt), ARGS(A_INTS(2), a_flt(1e-3)));
    EXPECT(rt, LNT_R);
    /* f16 */
    rgpu_view xh = mkX(RGPU_F16), wh = mk(RGPU_F16, 1, SZ(4), W4), bh = mk(RGPU_F16, 1, SZ(4), B4);
    rgpu_view yh = mk(RGPU_F16, 3, SZ(2, 3, 4), NULL);
    rgpu_view mh = mk(RGPU_F16, 3, SZ(2, 3, 1), NULL), rh = mk(RGPU_F16, 3, SZ(2, 3, 1), NULL);
    expect_layer_norm(&xh, &wh, &bh, &yh, &mh, &rh, LNH_Y, LNH_M, LNH_R);
    /* in place over x */
    rgpu_view xi = mkX(RGPU_F32);
    RUN_EXPECT(xi, LN_Y, RGPU_OP_LAYER_NORM, INS(&xi, &w, &b), OUTS(&xi, &m, &r), ARGS(A_INTS(4), a_flt(1e-5)));
    /* zero-size: no rows; empty rows give mean 0, rstd NaN */
    rgpu_view xe = mk(RGPU_F32, 2, SZ(0, 3), NULL), ye = mk(RGPU_F32, 2, SZ(0, 3), NULL);
    rgpu_view me = mk(RGPU_F32, 2, SZ(0, 1), NULL);
    RUN_OK(RGPU_OP_LAYER_NORM, INS(&xe, NULL, NULL), OUTS(&ye, &me, &me), ARGS(A_INTS(3), a_flt(1e-5)));
    rgpu_view xz = mk(RGPU_F32, 2, SZ(2, 0), NULL), yz = mk(RGPU_F32, 2, SZ(2, 0), NULL);
    rgpu_view mz = mk(RGPU_F32, 2, SZ(2, 1), NULL), rz = mk(RGPU_F32, 2, SZ(2, 1), NULL);
    RUN_OK(RGPU_OP_LAYER_NORM, INS(&xz, NULL, NULL), OUTS(&yz, &mz, &rz), ARGS(A_INTS(0), a_flt(1e-5)));
    static const double z2[] = {0, 0}, n2[] = {NAN, NAN};
    EXPECT(mz, z2);
    EXPECT(rz, n2);
    /* errors */
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_LAYER_NORM, INS(&x, &w, &b), OUTS(&y, &m, &r), ARGS(A_INTS(3), a_flt(1e-5)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_LAYER_NORM, INS(&x, &w, &b), OUTS(&y, &m2, &r), ARGS(A_INTS(4), a_flt(1e-5)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_LAYER_NORM, INS(&x, &bt, &b), OUTS(&y, &m, &r), ARGS(A_INTS(4), a_flt(1e-5)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_LAYER_NORM, INS(&x, &w, &b), OUTS(&y, &m, &r), ARGS(A_NOINTS, a_flt(1e-5)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_LAYER_NORM, INS(&x, &w, &b), OUTS(&y, &m, &r), ARGS(A_INTS(4), a_none()));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_LAYER_NORM, INS(&x, &w, &b), OUTS(NULL, &m, &r), ARGS(A_INTS(4), a_flt(1e-5)));
}
END_TEST

/* _fused_rms_norm and its backward (values: torch's F.rms_norm in float64 on X24, W4, G24) */
START_TEST(test_rms_norm)
{
    rgpu_view x = mkX(RGPU_F32), w = mk(RGPU_F32, 1, SZ(4), W4), g = mk(RGPU_F32, 3, SZ(2, 3, 4), G24);
    rgpu_view y = mk(RGPU_F32, 3, SZ(2, 3, 4), NULL), r = mk(RGPU_F32, 3, SZ(2, 3, 1), NULL);
    RUN_EXPECT(y, RMS_Y, RGPU_OP_RMS_NORM, INS(&x, &w), OUTS(&y, &r), ARGS(A_INTS(4), a_flt(1e-5)));
    EXPECT(r, RMS_R);
    rgpu_view dx = mk(RGPU_F32, 3, SZ(2, 3, 4), NULL), dw = mk(RGPU_F32, 1, SZ(4), NULL);
    RUN_EXPECT(dx, RMSB_DX, RGPU_OP_RMS_NORM_BACKWARD, INS(&g, &x, &r, &w), OUTS(&dx, &dw), ARGS(A_INTS(4)));
    EXPECT(dw, RMSB_DW);
    rgpu_view dw2 = mk(RGPU_F32, 1, SZ(4), NULL);        /* only dw */
    RUN_EXPECT(dw2, RMSB_DW, RGPU_OP_RMS_NORM_BACKWARD, INS(&g, &x, &r, &w), OUTS(NULL, &dw2), ARGS(A_INTS(4)));
    /* bad input: normalized_shape, weight shape, rstd shape, integer x: errors, nothing written */
    rgpu_view w3 = mk(RGPU_F32, 1, SZ(3), W4), r4 = mk(RGPU_F32, 3, SZ(2, 3, 4), NULL), xi = mk(RGPU_I64, 3, SZ(2, 3, 4), NULL);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_RMS_NORM, INS(&x, &w), OUTS(&y, &r), ARGS(A_INTS(3), a_flt(1e-5)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_RMS_NORM, INS(&x, &w3), OUTS(&y, &r), ARGS(A_INTS(4), a_flt(1e-5)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_RMS_NORM, INS(&x, &w), OUTS(&y, &r4), ARGS(A_INTS(4), a_flt(1e-5)));
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_RMS_NORM, INS(&xi, &w), OUTS(&y, &r), ARGS(A_INTS(4), a_flt(1e-5)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_RMS_NORM_BACKWARD, INS(&g, &x, &r4, &w), OUTS(&dx, &dw), ARGS(A_INTS(4)));
}
END_TEST

START_TEST(test_layer_norm_backward)
{
    rgpu_view x = mkX(RGPU_F32), g = mk(RGPU_F32, 3, SZ(2, 3, 4), G24);
    rgpu_view w = mk(RGPU_F32, 1, SZ(4), W4), b = mk(RGPU_F32, 1, SZ(4), B4);
    rgpu_view m = mk(RGPU_F32, 3, SZ(2, 3, 1), LN_M), r = mk(RGPU_F32, 3, SZ(2, 3, 1), LN_R);
    rgpu_view dx = mk(RGPU_F32, 3, SZ(2, 3, 4), NULL);
    rgpu_view dw = mk(RGPU_F32, 1, SZ(4), NULL), db = mk(RGPU_F32, 1, SZ(4), NULL);
    RUN_EXPECT(dx, LNB_DX, RGPU_OP_LAYER_NORM_BACKWARD, INS(&g, &x, &m, &r, &w, &b), OUTS(&dx, &dw, &db),
               ARGS(A_INTS(4)));
    EXPECT(dw, LNB_DW);
    EXPECT(db, LNB_DB);
    /* only dw, db (strided); only dx */
    rgpu_view dws = mk_s(RGPU_F32, 1, SZ(4), SZ(2), NULL), dbs = mk_s(RGPU_F32, 1, SZ(4), SZ(3), NULL);
    RUN_EXPECT(dws, LNB_DW, RGPU_OP_LAYER_NORM_BACKWARD, INS(&g, &x, &m, &r, &w, NULL), OUTS(NULL, &dws, &dbs),
               ARGS(A_INTS(4)));
    EXPECT(dbs, LNB_DB);
    rgpu_view dxt = tr(mk(RGPU_F32, 3, SZ(4, 3, 2), NULL), 0, 2);
    RUN_EXPECT(dxt, LNB_DX, RGPU_OP_LAYER_NORM_BACKWARD, INS(&g, &x, &m, &r, &w, &b), OUTS(&dxt, NULL, NULL),
               ARGS(A_INTS(4)));
    /* two normalized dims, no weight */
    rgpu_view m2 = mk(RGPU_F32, 3, SZ(2, 1, 1), LN2_M), r2 = mk(RGPU_F32, 3, SZ(2, 1, 1), LN2_R);
    RUN_EXPECT(dx, LNB2_DX, RGPU_OP_LAYER_NORM_BACKWARD, INS(&g, &x, &m2, &r2, NULL, NULL), OUTS(&dx, NULL, NULL),
               ARGS(A_INTS(3, 4)));
    /* no rows: dw, db are zeros */
    rgpu_view xe = mk(RGPU_F32, 2, SZ(0, 4), NULL), me = mk(RGPU_F32, 2, SZ(0, 1), NULL);
    RUN_OK(RGPU_OP_LAYER_NORM_BACKWARD, INS(&xe, &xe, &me, &me, &w, NULL), OUTS(&xe, &dw, &db), ARGS(A_INTS(4)));
    static const double z4[] = {0, 0, 0, 0};
    EXPECT(dw, z4);
    EXPECT(db, z4);
    /* errors */
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_LAYER_NORM_BACKWARD, INS(&g, &x, &m2, &r, &w, &b), OUTS(&dx, &dw, &db), ARGS(A_INTS(4)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_LAYER_NORM_BACKWARD, INS(&g, &x, &m, &r, &w, &b), OUTS(&dx, &dxt, &db), ARGS(A_INTS(4)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_LAYER_NORM_BACKWARD, INS(&g, &x, NULL, &r, &w, &b), OUTS(&dx, &dw, &db), ARGS(A_INTS(4)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_LAYER_NORM_BACKWARD, INS(&g, &x, &m, &r, &w, &b), OUTS(&dx, &dw, &db), ARGS(a_int(4)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * nll_loss */

static const double T6[] = {0, 3, -100, 2, 1, 3};
static const double WC4[] = {0.5, 1.0, 2.0, 1.5};

START_TEST(test_nll_loss)
{
    rgpu_view lp = mk(RGPU_F32, 2, SZ(6, 4), LP), t = mk(RGPU_I64, 1, SZ(6), T6), w = mk(RGPU_F32, 1, SZ(4), WC4);
    rgpu_view l0 = mk(RGPU_F32, 1, SZ(6), NULL), l = mk(RGPU_F32, 0, NULL, NULL), tw = mk(RGPU_F32, 0, NULL, NULL);
    RUN_EXPECT(l0, NLL_W_0, RGPU_OP_NLL_LOSS, INS(&lp, &t, &w), OUTS(&l0, &tw), ARGS(a_int(0), a_int(-100)));
    EXPECT(tw, NLL_W_0_TW);
    RUN_EXPECT(l, NLL_W_1, RGPU_OP_NLL_LOSS, INS(&lp, &t, &w), OUTS(&l, &tw), ARGS(a_int(1), a_int(-100)));
    EXPECT(tw, NLL_W_1_TW);
    RUN_EXPECT(l, NLL_W_2, RGPU_OP_NLL_LOSS, INS(&lp, &t, &w), OUTS(&l, &tw), ARGS(a_int(2), a_int(-100)));
    EXPECT(tw, NLL_W_2_TW);
    RUN_EXPECT(l0, NLL_0, RGPU_OP_NLL_LOSS, INS(&lp, &t, NULL), OUTS(&l0, &tw), ARGS(a_int(0), a_int(-100)));
    EXPECT(tw, NLL_0_TW);
    RUN_EXPECT(l, NLL_1, RGPU_OP_NLL_LOSS, INS(&lp, &t, NULL), OUTS(&l, &tw), ARGS(a_int(1), a_int(-100)));
    EXPECT(tw, NLL_1_TW);
    RUN_EXPECT(l, NLL_2, RGPU_OP_NLL_LOSS, INS(&lp, &t, NULL), OUTS(&l, &tw), ARGS(a_int(2), a_int(-100)));
    EXPECT(tw, NLL_2_TW);
    RUN_OK(RGPU_OP_NLL_LOSS, INS(&lp, &t, NULL), OUTS(&l, NULL), ARGS(a_int(2), a_int(-100)));   /* no total_weight */
    EXPECT(l, NLL_2);
    /* transposed logp (C,N)^T, uint8 targets with ignore_index 3 */
    rgpu_view lpt = tr(mk_s(RGPU_F32, 2, SZ(4, 6), NULL, NULL), 0, 1);
    for (int64_t i = 0; i < 24; i++) *(float *)((char *)lpt.data + offset_of(&lpt, i)) = (float)LP[i];
    static const double tu[] = {0, 3, 1, 2, 1, 3};
    rgpu_view t8 = mk(RGPU_U8, 1, SZ(6), tu);
    RUN_OK(RGPU_OP_NLL_LOSS, INS(&lpt, &t8, NULL), OUTS(&l, &tw), ARGS(a_int(2), a_int(3)));
    double want = -(LP[0] + LP[2 * 4 + 1] + LP[3 * 4 + 2] + LP[4 * 4 + 1]);
    EXPECT_N(l, &want, 1);
    /* 1-d logp with a 0-d target */
    rgpu_view lp1 = mk(RGPU_F32, 1, SZ(4), LP + 4);
    static const double two[] = {2};
    rgpu_view t0 = mk(RGPU_I64, 0, NULL, two);
    RUN_EXPECT(l, NLL_1D, RGPU_OP_NLL_LOSS, INS(&lp1, &t0, &w), OUTS(&l, &tw), ARGS(a_int(1), a_int(-100)));
    EXPECT(tw, NLL_1D_TW);
    /* all ignored: mean is NaN, sum 0; empty */
    static const double ign[] = {-100, -100}, nan1[] = {NAN}, zero1[] = {0};
    rgpu_view lp2 = mk(RGPU_F32, 2, SZ(2, 4), LP), ti = mk(RGPU_I64, 1, SZ(2), ign);
    RUN_EXPECT(l, nan1, RGPU_OP_NLL_LOSS, INS(&lp2, &ti, NULL), OUTS(&l, &tw), ARGS(a_int(1), a_int(-100)));
    EXPECT(tw, zero1);
    rgpu_view lpe = mk(RGPU_F32, 2, SZ(0, 4), NULL), te = mk(RGPU_I64, 1, SZ(0), NULL);
    RUN_EXPECT(l, nan1, RGPU_OP_NLL_LOSS, INS(&lpe, &te, NULL), OUTS(&l, &tw), ARGS(a_int(1), a_int(-100)));
    RUN_EXPECT(l, zero1, RGPU_OP_NLL_LOSS, INS(&lpe, &te, NULL), OUTS(&l, &tw), ARGS(a_int(2), a_int(-100)));
    /* errors */
    static const double bad[] = {0, 70};
    rgpu_view tb = mk(RGPU_I64, 1, SZ(2), bad);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NLL_LOSS, INS(&lp2, &tb, NULL), OUTS(&l, &tw), ARGS(a_int(1), a_int(-100)));
    ck_assert_str_eq(g_err, "nll_loss_forward: Target 70 is out of bounds.");
    static const double neg[] = {-1, 0};
    rgpu_view tn = mk(RGPU_I64, 1, SZ(2), neg), l2 = mk(RGPU_F32, 1, SZ(2), NULL);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NLL_LOSS, INS(&lp2, &tn, NULL), OUTS(&l2, &tw), ARGS(a_int(0), a_int(-100)));
    ck_assert_str_eq(g_err, "nll_loss_forward: Target -1 is out of bounds.");
    rgpu_view t32 = mk(RGPU_I32, 1, SZ(6), T6);
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_NLL_LOSS, INS(&lp, &t32, NULL), OUTS(&l, &tw), ARGS(a_int(1), a_int(-100)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_NLL_LOSS, INS(&lp, &ti, NULL), OUTS(&l, &tw), ARGS(a_int(1), a_int(-100)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_NLL_LOSS, INS(&lp, &t, NULL), OUTS(&l, &tw), ARGS(a_int(0), a_int(-100)));
    rgpu_view w3 = mk(RGPU_F32, 1, SZ(3), WC4);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_NLL_LOSS, INS(&lp, &t, &w3), OUTS(&l, &tw), ARGS(a_int(1), a_int(-100)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NLL_LOSS, INS(&lp, &t, NULL), OUTS(&l, &tw), ARGS(a_int(3), a_int(-100)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NLL_LOSS, INS(&lp, &t, NULL), OUTS(&l, &tw), ARGS(a_int(1)));
}
END_TEST

START_TEST(test_nll_loss_backward)
{
    rgpu_view lp = mk(RGPU_F32, 2, SZ(6, 4), LP), t = mk(RGPU_I64, 1, SZ(6), T6), w = mk(RGPU_F32, 1, SZ(4), WC4);
    rgpu_view gx = mk(RGPU_F32, 2, SZ(6, 4), NULL);
    static const double g17[] = {1.7}, tw[] = {NLL_W_1_TW[0]};
    rgpu_view go = mk(RGPU_F32, 0, NULL, g17), twv = mk(RGPU_F32, 0, NULL, tw);
    RUN_EXPECT(gx, NLLB_W_1, RGPU_OP_NLL_LOSS_BACKWARD, INS(&go, &lp, &t, &w, &twv), OUTS(&gx),
               ARGS(a_int(1), a_int(-100)));
    static const double gov[] = {0.5, -1., 2., 1.5, 0.25, -0.75}, z[] = {0};
    rgpu_view go6 = mk(RGPU_F32, 1, SZ(6), gov), tz = mk(RGPU_F32, 0, NULL, z);
    rgpu_view gxt = tr(mk(RGPU_F32, 2, SZ(4, 6), NULL), 0, 1);
    RUN_EXPECT(gxt, NLLB_W_0, RGPU_OP_NLL_LOSS_BACKWARD, INS(&go6, &lp, &t, &w, &tz), OUTS(&gxt),
               ARGS(a_int(0), a_int(-100)));
    static const double gm5[] = {-0.5}, five[] = {5};
    rgpu_view gs = mk(RGPU_F64, 1, SZ(1), gm5), t5 = mk(RGPU_F64, 0, NULL, five);
    RUN_EXPECT(gx, NLLB_2, RGPU_OP_NLL_LOSS_BACKWARD, INS(&gs, &lp, &t, NULL, &t5), OUTS(&gx),
               ARGS(a_int(2), a_int(-100)));
    /* errors */
    static const double bad[] = {0, 3, 4, 2, 1, 3};
    rgpu_view tb = mk(RGPU_I64, 1, SZ(6), bad);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NLL_LOSS_BACKWARD, INS(&go, &lp, &tb, &w, &twv), OUTS(&gx), ARGS(a_int(1), a_int(-100)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_NLL_LOSS_BACKWARD, INS(&go, &lp, &t, &w, &twv), OUTS(&gx), ARGS(a_int(0), a_int(-100)));
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_NLL_LOSS_BACKWARD, INS(&go6, &lp, &t, &w, &twv), OUTS(&gx), ARGS(a_int(1), a_int(-100)));
    rgpu_view gx46 = mk(RGPU_F32, 2, SZ(4, 6), NULL);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_NLL_LOSS_BACKWARD, INS(&go, &lp, &t, &w, &twv), OUTS(&gx46), ARGS(a_int(1), a_int(-100)));
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NLL_LOSS_BACKWARD, INS(&go, &lp, &t, &w, NULL), OUTS(&gx), ARGS(a_int(1), a_int(-100)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * The family: ownership, dispatch, arity, a large softmax / layer norm */

START_TEST(test_family)
{
    static const int mine[] = {
        RGPU_OP_AMAX, RGPU_OP_AMIN, RGPU_OP_ARGMAX, RGPU_OP_ARGMIN, RGPU_OP_MAX_DIM, RGPU_OP_MIN_DIM,
        RGPU_OP_VAR, RGPU_OP_STD, RGPU_OP_NORM, RGPU_OP_ANY, RGPU_OP_ALL, RGPU_OP_PROD, RGPU_OP_CUMSUM,
        RGPU_OP_SOFTMAX, RGPU_OP_LOG_SOFTMAX, RGPU_OP_SOFTMAX_BACKWARD, RGPU_OP_LOG_SOFTMAX_BACKWARD,
        RGPU_OP_LAYER_NORM, RGPU_OP_LAYER_NORM_BACKWARD, RGPU_OP_NLL_LOSS, RGPU_OP_NLL_LOSS_BACKWARD,
        RGPU_OP_CTC_LOSS, RGPU_OP_CTC_LOSS_BACKWARD, RGPU_OP_RMS_NORM, RGPU_OP_RMS_NORM_BACKWARD,
        RGPU_OP_CROSS_ENTROPY, RGPU_OP_CROSS_ENTROPY_BACKWARD,
    };
    int n = 0;
    for (int op = 0; op < RGPU_OP_COUNT; op++) {
        bool want = false;
        for (size_t k = 0; k < sizeof mine / sizeof mine[0]; k++) want |= mine[k] == op;
        ck_assert_msg(family_owns(op) == want, "owns(%s)", rgpu_op_name(op));
        ck_assert(rgpu_cpu_supports(op) || !want);
        n += want;
    }
    ck_assert_int_eq(n, 27);
    ck_assert(!family_owns(-1) && !family_owns(RGPU_OP_COUNT));
    rgpu_exec e;
    memset(&e, 0, sizeof e);
    e.op = RGPU_OP_SUM;
    ck_assert_int_eq(rgpu_cpu_reduce2_exec(&e, g_err, sizeof g_err), RGPU_ERR_UNSUPPORTED);
    ck_assert_str_eq(g_err, "cpu backend: unsupported op sum.dim_IntList");
    /* arity */
    rgpu_view x = mkX(RGPU_F32), o = mk(RGPU_F32, 3, SZ(2, 3, 4), NULL);
    e.op = RGPU_OP_SOFTMAX;
    e.n_in = 2; e.n_out = 1;
    e.in[0] = &x; e.in[1] = &x; e.out[0] = &o;
    rgpu_arg args[2] = { a_int(2), a_bool(0) };
    e.args = args; e.n_args = 2;
    ck_assert_int_eq(rgpu_cpu_exec(&e, g_err, sizeof g_err), RGPU_ERR_ARITY);
    e.n_in = 1;
    e.n_args = 2; e.args = NULL;
    ck_assert_int_eq(rgpu_cpu_exec(&e, g_err, sizeof g_err), RGPU_ERR_BAD_ARG);
    e.args = args;
    ck_assert_int_eq(rgpu_cpu_exec(&e, g_err, sizeof g_err), RGPU_OK);
    /* a stride-0 row of 2^62 elements over one float: out of memory, not a crash */
    static float one = 1.0f;
    rgpu_view huge;
    memset(&huge, 0, sizeof huge);
    huge.data = &one; huge.dtype = RGPU_F32; huge.ndim = 2;
    huge.sizes[0] = 1; huge.sizes[1] = INT64_C(1) << 62;
    e.in[0] = &huge; e.out[0] = &huge;
    args[0] = a_int(1);
    ck_assert_msg(rgpu_cpu_exec(&e, g_err, sizeof g_err) == RGPU_ERR_NOMEM, "%s", g_err);
    rgpu_view hm = mk(RGPU_F32, 2, SZ(1, 1), NULL);
    RUN_ERR(RGPU_ERR_NOMEM, RGPU_OP_LAYER_NORM, INS(&huge, NULL, NULL), OUTS(&huge, &hm, &hm), ARGS(A_INTS(INT64_C(1) << 62), a_flt(1e-5)));
    huge.ndim = 3; huge.sizes[1] = INT64_C(1) << 61; huge.sizes[2] = 2;   /* a row needing an offset table */
    rgpu_view hm3 = mk(RGPU_F32, 3, SZ(1, 1, 1), NULL);
    RUN_ERR(RGPU_ERR_NOMEM, RGPU_OP_LAYER_NORM, INS(&huge, NULL, NULL), OUTS(&huge, &hm3, &hm3), ARGS(A_INTS(INT64_C(1) << 61, 2), a_flt(1e-5)));
    e.in[0] = &x; e.out[0] = &o;
    args[0] = a_int(2);
    /* a view with a negative stride is rejected */
    rgpu_view neg = x;
    neg.strides[1] = -4;
    e.in[0] = &neg;
    ck_assert_int_eq(rgpu_cpu_exec(&e, g_err, sizeof g_err), RGPU_ERR_SHAPE);
}
END_TEST

/* GPT-sized rows: (B*T, C) = (4096, 384) layer norm fwd/bwd and a (256, 4096)
 * softmax; checks invariants (rows sum to 1, normalized rows have mean 0 and
 * unit variance, sum of dx is 0 without weight). */
START_TEST(test_large_rows)
{
    enum { R = 4096, C = 384 };
    rgpu_view x = mk(RGPU_F32, 2, SZ(R, C), NULL), y = mk(RGPU_F32, 2, SZ(R, C), NULL);
    float *xp = x.data;
    uint32_t s = 12345;
    for (int64_t i = 0; i < (int64_t)R * C; i++) { s = s * 1664525u + 1013904223u; xp[i] = (float)((s >> 8) * 0x1p-24 * 8.0 - 4.0); }
    rgpu_view m = mk(RGPU_F32, 2, SZ(R, 1), NULL), r = mk(RGPU_F32, 2, SZ(R, 1), NULL);
    RUN_OK(RGPU_OP_LAYER_NORM, INS(&x, NULL, NULL), OUTS(&y, &m, &r), ARGS(A_INTS(C), a_flt(1e-5)));
    const float *yp = y.data;
    for (int64_t i = 0; i < R; i += 97) {
        double mu = 0, v = 0;
        for (int j = 0; j < C; j++) mu += yp[i * C + j];
        mu /= C;
        for (int j = 0; j < C; j++) v += (yp[i * C + j] - mu) * (yp[i * C + j] - mu);
        ck_assert(fabs(mu) < 1e-6 && fabs(v / C - 1) < 1e-3);
    }
    rgpu_view dx = mk(RGPU_F32, 2, SZ(R, C), NULL);
    RUN_OK(RGPU_OP_LAYER_NORM_BACKWARD, INS(&x, &x, &m, &r, NULL, NULL), OUTS(&dx, NULL, NULL), ARGS(A_INTS(C)));
    const float *dp = dx.data;
    for (int64_t i = 0; i < R; i += 97) {
        double sum = 0;
        for (int j = 0; j < C; j++) sum += dp[i * C + j];
        ck_assert(fabs(sum) < 1e-3);
    }
    rgpu_view xs = x, ys = y;
    xs.sizes[0] = ys.sizes[0] = 384; xs.sizes[1] = ys.sizes[1] = 4096;
    xs.strides[0] = ys.strides[0] = 4096;
    RUN_OK(RGPU_OP_SOFTMAX, INS(&xs), OUTS(&ys), ARGS(a_int(1), a_bool(0)));
    for (int64_t i = 0; i < 384; i += 31) {
        double sum = 0;
        for (int j = 0; j < 4096; j++) sum += yp[i * 4096 + j];
        ck_assert(fabs(sum - 1) < 1e-5);
    }
}
END_TEST

/* ---------------------------------------------------------------------------*/

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_reduce2");
    TCase *tc = add_tcase(s, "ops", 60, NULL, teardown);
    ADD_TESTS(tc, test_amax_amin, test_amax_dtypes, test_amax_errors, test_argmax, test_max_min_dim,
                  test_var_std, test_norm, test_any_all, test_prod, test_cumsum, test_softmax,
                  test_softmax_backward, test_layer_norm, test_layer_norm_backward, test_rms_norm, test_nll_loss,
                  test_nll_loss_backward, test_family, test_large_rows);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
